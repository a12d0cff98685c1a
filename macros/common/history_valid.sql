{#- A generic data test for history models (meta.cdc.history): no version ends before it
    starts, and, given the key, no key has two open versions. Use it beside lineage_complete:
      data_tests:
        - cdc.history_valid:
            arguments: {key: [account_id]}
    Renamed history columns (snapshot_meta_column_names) are given as valid_from / valid_to.
    A row it returns is a broken version: the test fails, and `runner run` says so. -#}
{% test history_valid(model, key=none, valid_from=none, valid_to=none) %}
  {%- set lin = cdc.lineage_columns() -%}
  {%- set q = adapter.quote -%}
  {%- set v_from = q(valid_from or lin.valid_from) -%}
  {%- set v_to = q(valid_to or lin.valid_to) -%}
  {%- set keys = ([key] if key is string else key) or [] -%}
  select 'ends before it starts' as cdc_problem
  from {{ model }}
  where {{ v_to }} is not null and {{ v_to }} < {{ v_from }}
  {%- if keys %}
  union all
  select 'more than one open version of a key' as cdc_problem
  from {{ model }}
  where {{ v_to }} is null
  group by {% for k in keys %}{{ q(k) }}{{ ', ' if not loop.last }}{% endfor %}
  having count(*) > 1
  {%- endif %}
{% endtest %}
