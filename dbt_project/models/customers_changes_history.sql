-- Every change of customers as a version (SCD Type 2 from the change log), applied from the same
-- staged Files as `customers`: a File with three changes of a customer gives three versions, in
-- sequence order across Files and runs. Each version is valid from the change's time at the
-- source (changed_at: the time part of the DMS change sequence, config meta.cdc.valid_from)
-- until the customer's next change or delete; a late File's changes land in their place.
-- Same SQL as customers.sql plus changed_at: the config (meta.cdc.history) makes it a history.
select
    customer_id,
    name,
    email,
    tier,
    balance,
    updated_at,
    {{ cdc.dms_change_time('AR_H_CHANGE_SEQ') }} as changed_at,
    {{ cdc.lineage_select() }}
from {{ cdc.unapplied(ref('stg_customers')) }}
