-- Current state of the customers. Edit freely; keep the key, the lineage and the FROM.
select
    id,
    first_name,
    email,
    {{ cdc.lineage_select() }}
from {{ cdc.unapplied(source('mysql_inventory', 'mysql_customers')) }}
