{#- dbt-spark (1.11): the merge strategy and the first-run CTAS of apply models. Other models
    get dbt-spark's own macros unchanged. -#}

{% macro spark__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) %}
  {%- if cdc.is_apply_model() -%}
    {{ return(cdc.spark_family_apply(target, source)) }}
  {%- endif -%}
  {{ return(dbt.spark__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates)) }}
{% endmacro %}

{% macro spark__create_table_as(temporary, relation, compiled_code, language='sql') %}
  {%- if temporary or language != 'sql' or not cdc.is_apply_model() -%}
    {{ return(dbt.spark__create_table_as(temporary, relation, compiled_code, language)) }}
  {%- endif -%}
  {%- set create = dbt.spark__create_table_as(false, relation, cdc.empty_target_select(compiled_code), 'sql') -%}
  {{ return(cdc.spark_family_apply(relation, compiled_code, create)) }}
{% endmacro %}
