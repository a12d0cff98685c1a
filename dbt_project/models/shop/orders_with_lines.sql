-- Orders with their lines, denormalized (one row per line; an order without lines has one row
-- with empty line columns). Both tables hold the same cut of the source, so a line never shows
-- without the order its transaction wrote.
select
    o.order_id,
    o.customer_id,
    o.status,
    o.total,
    l.line_id,
    l.sku,
    l.quantity,
    l.price
from {{ ref('orders') }} as o
left join {{ ref('order_lines') }} as l on l.order_id = o.order_id
