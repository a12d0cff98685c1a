{#- A generic data test: every lineage column of every row is filled. Use it on apply models:
      data_tests: [cdc.lineage_complete]
-#}
{% test lineage_complete(model) %}
  {%- set lin = cdc.lineage_columns() -%}
  select *
  from {{ model }}
  where {% for n in lin.values() %}{{ n }} is null{{ ' or ' if not loop.last }}{% endfor %}
{% endtest %}
