{#- dbt-bigquery (1.12): one multi-statement script, BEGIN TRANSACTION ... COMMIT TRANSACTION,
    so target changes and markers commit together. Run live on the local BigQuery emulator in
    the tests (docs/destinations.md, "Verified where"), and parsed in the BigQuery dialect. -#}

{% macro bigquery__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates=none) %}
  {%- if cdc.is_apply_model() -%}
    {{ return(cdc.bigquery_script(cdc.model_apply_statements(target, source), target)) }}
  {%- endif -%}
  {{ return(dbt.default__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates)) }}
{% endmacro %}

{% macro bigquery__create_table_as(temporary, relation, compiled_code, language='sql') %}
  {%- if temporary or language != 'sql' or not cdc.is_apply_model() -%}
    {{ return(dbt.bigquery__create_table_as(temporary, relation, compiled_code, language)) }}
  {%- endif -%}
  {%- set create = dbt.bigquery__create_table_as(false, relation, cdc.empty_target_select(compiled_code), 'sql') -%}
  {{ return(cdc.bigquery_script(cdc.create_or_apply_statements(relation, compiled_code, create), relation)) }}
{% endmacro %}

{#- The scratch (temp) tables are dropped before the transaction and after the commit: a
    second apply in one session, or after a failed script whose temp tables outlived it (the
    emulator keeps them), must be able to create them again. -#}
{% macro bigquery_script(statements, target) %}
  {%- if statements == [cdc.nothing_to_apply_sql()] -%}{{ return(statements[0]) }}{%- endif -%}
  {%- set drops = [] -%}
  {%- for suffix in cdc.scratch_suffixes() -%}
    {%- do drops.append(cdc.drop_scratch_sql(cdc.scratch_relation(target, suffix))) -%}
  {%- endfor -%}
  {%- set drop_sql = drops | join(';\n') ~ ';\n' -%}
  {{ return(drop_sql ~ 'begin transaction;\n' ~ (statements | join(';\n')) ~ ';\ncommit transaction;\n' ~ drop_sql) }}
{% endmacro %}
