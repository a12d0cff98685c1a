-- Current state of the DMS customers. Edit freely; keep the key, the lineage and the FROM.
select
    customer_id,
    name,
    tier,
    balance,
    updated_at,
    {{ cdc.lineage_select() }}
from {{ cdc.unapplied(source('dms', 'dms_customers')) }}
