-- The group's ledger: one row per source transaction, released (applied by orders and
-- order_lines), held (waiting for its events or for an earlier transaction) or quarantined
-- (incomplete too long). `runner status` reads it; see the cdc package's transactions.sql.
{{ cdc.transaction_ledger('shop_transactions', source('cdc_shop', 'shop_transactions'),
    {'orders': ref('stg_orders'), 'order_lines': ref('stg_order_lines')}) }}
