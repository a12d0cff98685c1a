-- Current state of order lines, applied with orders from the same released transactions.
select
    line_id,
    order_id,
    sku,
    quantity,
    price,
    tx_id,
    {{ cdc.lineage_select() }}
from {{ cdc.unapplied(ref('stg_order_lines'), transactions=ref('shop_transactions')) }}
