-- Every change of the customers as a version (SCD Type 2 from the change log): valid from the
-- change's binlog position until the customer's next change or delete, in binlog order across
-- Files, rotations and runs. Same SQL as mysql_customers_current; the config makes it a history.
select
    id,
    first_name,
    email,
    {{ cdc.lineage_select() }}
from {{ cdc.unapplied(source('mysql_inventory', 'mysql_customers')) }}
