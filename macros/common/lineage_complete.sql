{#- A generic data test: every lineage column of every row is filled (the staged ones and the
    ones the apply adds, as the contract lists them). Use it on apply models:
      data_tests: [cdc.lineage_complete]
-#}
{% test lineage_complete(model) %}
  {%- set names = [] -%}
  {%- for col in cdc.lineage_on('staged') + cdc.lineage_on('applied') -%}
    {%- do names.append(adapter.quote(col.name)) -%}
  {%- endfor -%}
  select *
  from {{ model }}
  where {% for n in names %}{{ n }} is null{{ ' or ' if not loop.last }}{% endfor %}
{% endtest %}
