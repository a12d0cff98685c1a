-- The staged rows of the accounts extracts, as `runner ingest` wrote them: typed, validated,
-- with their key and row hashes and the extract's effective date (the lineage columns).
select * from {{ source('cdc_staging', 'accounts') }}
