-- The staged order line events, as `runner ingest` wrote them.
select * from {{ source('cdc_shop', 'order_lines') }}
