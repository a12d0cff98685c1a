{#- dbt-bigquery (1.12): one multi-statement script, BEGIN TRANSACTION ... COMMIT TRANSACTION,
    so target changes and markers commit together. Not verified against live BigQuery; the
    rendered script is parsed in the BigQuery dialect in the tests. -#}

{% macro bigquery__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates=none) %}
  {%- if cdc.is_apply_model() -%}
    {{ return(cdc.bigquery_script(cdc.model_apply_statements(target, source))) }}
  {%- endif -%}
  {{ return(dbt.default__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates)) }}
{% endmacro %}

{% macro bigquery__create_table_as(temporary, relation, compiled_code, language='sql') %}
  {%- if temporary or language != 'sql' or not cdc.is_apply_model() -%}
    {{ return(dbt.bigquery__create_table_as(temporary, relation, compiled_code, language)) }}
  {%- endif -%}
  {%- set create = dbt.bigquery__create_table_as(false, relation, cdc.empty_target_select(compiled_code), 'sql') -%}
  {{ return(cdc.bigquery_script(cdc.create_then_apply_statements(relation, compiled_code, create))) }}
{% endmacro %}

{% macro bigquery_script(statements) %}
  {{ return('begin transaction;\n' ~ (statements | join(';\n')) ~ ';\ncommit transaction;') }}
{% endmacro %}
