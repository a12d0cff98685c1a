{#- A generic data test: every lineage column of every row is filled. Use it on apply models:
      data_tests: [cdc.lineage_complete]
-#}
{% test lineage_complete(model) %}
  {%- set lin = cdc.lineage_columns() -%}
  {%- set names = [lin.operation, lin.sequence, lin.process_id, lin.file_hash, lin.file_name,
                   lin.row_number, lin.ingested_at, lin.invocation_id, lin.applied_at] -%}
  select *
  from {{ model }}
  where {% for n in names %}{{ n }} is null{{ ' or ' if not loop.last }}{% endfor %}
{% endtest %}
