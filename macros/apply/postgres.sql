{#- dbt-postgres (1.11): the whole apply is the materialization's `main` statement, inside the
    transaction dbt opens for the model, so target changes and markers commit together. -#}

{% macro postgres__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates=none) %}
  {%- if cdc.is_apply_model() -%}
    {{ return(cdc.model_apply_statements(target, source) | join(';\n') ~ ';') }}
  {%- endif -%}
  {{ return(dbt.default__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates)) }}
{% endmacro %}

{% macro postgres__create_table_as(temporary, relation, sql) %}
  {%- if temporary and cdc.is_apply_model() -%}
    {#- The model's rows (the Files without a marker, a group's released parts) are read under
        the apply's lock, in the model's transaction: a second build of the table waits here,
        then reads only what the first left (a part it applied is not counted twice). A view,
        not a table: the apply's statements read the staged rows themselves, not a copy of
        them written first. -#}
    {%- set sql_header = config.get('sql_header', none) -%}
    {{ return(cdc.postgres_apply_lock(cdc.target_name()) ~ ';\n'
        ~ (sql_header ~ '\n' if sql_header is not none else '')
        ~ 'create temporary view ' ~ relation ~ ' as (\n' ~ sql ~ '\n)') }}
  {%- endif -%}
  {%- if temporary or not cdc.is_apply_model() -%}
    {{ return(dbt.postgres__create_table_as(temporary, relation, sql)) }}
  {%- endif -%}
  {#- run_query shares the model's transaction: the lock, the reset and the CREATE commit with
      the apply. dbt found the table absent when the build started; under the apply's lock it is
      asked again, so a second build that created it meanwhile is waited for, and the model is
      then applied as an incremental run on what that build committed. -#}
  {%- do run_query(cdc.postgres_apply_lock(cdc.target_name())) -%}
  {%- if execute and not should_full_refresh() and cdc.relation_exists_now(relation) -%}
    {{ return(cdc.model_apply_statements(relation, '(' ~ sql ~ ')') | join(';\n') ~ ';') }}
  {%- endif -%}
  {%- set create = dbt.postgres__create_table_as(false, relation, cdc.empty_target_select(sql)) -%}
  {{ return(cdc.create_then_apply_statements(relation, sql, create) | join(';\n') ~ ';') }}
{% endmacro %}
