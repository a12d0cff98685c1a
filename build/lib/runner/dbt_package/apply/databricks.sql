{#- dbt-databricks (1.10): as on Spark, with Delta tables. Not verified against a live
    workspace; the rendered statements are parsed and run on local Spark in the tests. -#}

{% macro databricks__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) %}
  {%- if cdc.is_apply_model() -%}
    {{ return(cdc.spark_family_apply(target, source)) }}
  {%- endif -%}
  {{ return(dbt.databricks__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates)) }}
{% endmacro %}

{% macro databricks__create_table_as(temporary, relation, compiled_code, language='sql') %}
  {%- if temporary or language != 'sql' or not cdc.is_apply_model() -%}
    {{ return(dbt.databricks__create_table_as(temporary, relation, compiled_code, language)) }}
  {%- endif -%}
  {%- set create = dbt.databricks__create_table_as(false, relation, cdc.empty_target_select(compiled_code), 'sql') -%}
  {{ return(cdc.spark_family_apply(relation, compiled_code, create)) }}
{% endmacro %}
