{#- dbt-databricks (1.10): as on Spark, with Delta tables. Not verified against a live
    workspace; the rendered statements are parsed and run on local Spark in the tests. -#}

{% macro databricks__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) %}
  {%- if cdc.is_apply_model() -%}
    {%- set statements = cdc.model_apply_statements(target, source) -%}
    {%- do statements.append('drop table if exists ' ~ cdc.scratch_relation(target, 'batch')) -%}
    {{ return(cdc.run_all_but_last(statements)) }}
  {%- endif -%}
  {{ return(dbt.databricks__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates)) }}
{% endmacro %}

{% macro databricks__create_table_as(temporary, relation, compiled_code, language='sql') %}
  {%- if temporary or language != 'sql' or not cdc.is_apply_model() -%}
    {{ return(dbt.databricks__create_table_as(temporary, relation, compiled_code, language)) }}
  {%- endif -%}
  {%- set create = dbt.databricks__create_table_as(false, relation, cdc.empty_target_select(compiled_code), 'sql') -%}
  {%- set statements = cdc.create_then_apply_statements(relation, compiled_code, create) -%}
  {%- do statements.append('drop table if exists ' ~ cdc.scratch_relation(relation, 'batch')) -%}
  {{ return(cdc.run_all_but_last(statements)) }}
{% endmacro %}
