-- Current state of orders: only changes of released transactions (complete, and before any
-- transaction still open), so orders and order_lines always show the same cut.
select
    order_id,
    customer_id,
    status,
    total,
    tx_id,
    {{ cdc.lineage_select() }}
from {{ cdc.unapplied(ref('stg_orders'), transactions=ref('shop_transactions')) }}
