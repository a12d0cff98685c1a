{#- dbt-spark 1.11 dbt/include/spark/macros/materializations/snapshot.sql, wrapped.
    Its snapshot materialization adds a composite key's helper columns (dbt_unique_key_1, ...)
    to the snapshot table on the second run, and the third run then fails with an ambiguous
    reference; dbt-core's default materialization leaves them out. So do we (spark, databricks). -#}
{% macro spark__create_columns(relation, columns) %}
  {%- set kept = [] -%}
  {%- for column in columns -%}
    {%- if not modules.re.match('(?i)^dbt_unique_key(_[0-9]+)?$', column.name) -%}
      {%- do kept.append(column) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ dbt.spark__create_columns(relation, kept) }}
{% endmacro %}
