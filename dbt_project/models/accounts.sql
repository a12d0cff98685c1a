-- Current state of accounts (SCD Type 1), applied from the daily full extracts: new keys are
-- inserted, changed rows updated, missing keys deleted; unchanged rows are left alone.
-- Edit freely: rename or derive columns. Keep the key, the lineage columns and the FROM.
select
    account_id,
    owner,
    plan,
    monthly_fee,
    opened_on,
    extracted_at,
    {{ cdc.lineage_select() }}
from {{ cdc.unapplied(ref('stg_accounts')) }}
