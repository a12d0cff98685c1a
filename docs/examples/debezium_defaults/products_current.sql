-- Current state of the products. Edit freely; keep the key, the lineage and the FROM.
select
    id,
    name,
    price,
    weight,
    released,
    stocked_at,
    updated_at,
    opens,
    sku,
    {{ cdc.lineage_select() }}
from {{ cdc.unapplied(source('inventory', 'products')) }}
