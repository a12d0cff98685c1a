-- The staged order events, as `runner ingest` wrote them (typed, with the lineage columns).
select * from {{ source('cdc_shop', 'orders') }}
