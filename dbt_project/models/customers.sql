-- Current state of customers (SCD Type 1), applied from the staged CDC Files.
-- Edit freely: rename or derive columns. Keep the key, the lineage columns and the FROM.
select
    customer_id,
    name,
    email,
    tier,
    balance,
    updated_at,
    {{ cdc.lineage_select() }}
from {{ cdc.unapplied(ref('stg_customers')) }}
