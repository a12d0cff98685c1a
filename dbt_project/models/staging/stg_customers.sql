-- The staged rows of the customers Files, as `runner ingest` wrote them: typed, validated,
-- deduplicated, with the lineage columns. Rename or cast columns here if you like.
select * from {{ source('cdc_staging', 'customers') }}
