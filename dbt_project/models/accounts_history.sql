-- History of accounts (SCD Type 2), applied from the same daily extracts as `accounts`: one row
-- per version of an account, valid from the effective date of the extract that inserted or
-- changed it until the effective date of the extract that changed or dropped it
-- (the contract's valid_from and valid_to columns; valid_to NULL while current), with the
-- process ids of both.
-- Same SQL as accounts.sql: the config (meta.cdc.history) makes it a history.
select
    account_id,
    owner,
    plan,
    monthly_fee,
    opened_on,
    extracted_at,
    {{ cdc.lineage_select() }}
from {{ cdc.unapplied(ref('stg_accounts')) }}
