{#- The state tables (see common/state_tables.sql), created when missing by an on-run-start hook. -#}

{% macro create_state_tables() %}
  {{ return(adapter.dispatch('create_state_tables', 'cdc')()) }}
{% endmacro %}

{% macro default__create_state_tables() %}
  {%- if not execute -%}{{ return('') }}{%- endif -%}
  {%- set t = cdc.state_tables() -%}
  {%- set s, b, ts = dbt.type_string(), dbt.type_bigint(), dbt.type_timestamp() -%}
  {%- set types = {
      'staged_files': [s, s, s, s, b, ts],
      'applied_files': [s, s, s, s, s, ts, b, b, b, b],
      'tombstones': [s, s, s, s, s, s, ts],
  } -%}
  {%- set db = target.database if target.database is defined else none -%}
  {%- do adapter.create_schema(api.Relation.create(database=db, schema=target.schema)) -%}
  {%- for name, spec in t.items() -%}
    {%- set rel = api.Relation.create(database=db, schema=target.schema, identifier=spec.identifier) -%}
    {%- set ddl -%}
      create table if not exists {{ rel }} (
        {%- for col in spec.columns %}
        {{ col }} {{ types[name][loop.index0] }}{{ ',' if not loop.last }}
        {%- endfor %}
      ){{ cdc.table_format_clause() }}
    {%- endset -%}
    {%- do run_query(ddl) -%}
  {%- endfor -%}
  {{ return('') }}
{% endmacro %}

{#- PostgreSQL also makes a second marker for one (table, File) impossible: of two applies
    that got past every other guard, the second fails instead of applying twice. -#}
{% macro postgres__create_state_tables() %}
  {%- do cdc.default__create_state_tables() -%}
  {%- if execute -%}
    {%- set rel = cdc.state_relation('applied_files') -%}
    {%- do run_query('create unique index if not exists ' ~ adapter.quote(rel.identifier ~ '__one_per_file')
        ~ ' on ' ~ rel ~ ' (target_table, file_hash)') -%}
  {%- endif -%}
  {{ return('') }}
{% endmacro %}

{#- `using iceberg` / `using delta` on Spark destinations; nothing elsewhere. -#}
{% macro table_format_clause() %}
  {{ return(adapter.dispatch('table_format_clause', 'cdc')()) }}
{% endmacro %}
{% macro default__table_format_clause() %}{{ return('') }}{% endmacro %}
{% macro spark__table_format_clause() %}{{ return(' using ' ~ var('cdc_file_format', 'iceberg')) }}{% endmacro %}
{% macro databricks__table_format_clause() %}{{ return(' using ' ~ var('cdc_file_format', 'delta')) }}{% endmacro %}

{#- A state table as a relation, through source() so that it shows in lineage. -#}
{% macro state_relation(name) %}
  {{ return(source('cdc_state', name)) }}
{% endmacro %}

{#- Forget tombstones older than N days: a late File older than that could resurrect a key.
    `dbt run-operation` commits when the macro returns (PostgreSQL). -#}
{#- A timestamp N days before now, comparable with the state tables' timestamp columns. -#}
{% macro days_ago(days) %}
  {{ return(adapter.dispatch('days_ago', 'cdc')(days)) }}
{% endmacro %}
{% macro default__days_ago(days) %}
  {{ return(dbt.dateadd('day', -1 * days, dbt.current_timestamp())) }}
{% endmacro %}
{#- dbt-bigquery's dateadd returns a DATETIME, which BigQuery will not compare with a TIMESTAMP. -#}
{% macro bigquery__days_ago(days) %}
  {{ return('timestamp_sub(current_timestamp(), interval ' ~ days ~ ' day)') }}
{% endmacro %}

{% macro purge_tombstones(older_than_days) %}
  {%- set rel = cdc.state_relation('tombstones') -%}
  {%- do run_query('delete from ' ~ rel ~ ' where deleted_at < ' ~ cdc.days_ago(older_than_days | int)) -%}
  {{ log('purged tombstones older than ' ~ older_than_days ~ ' days from ' ~ rel, info=true) }}
{% endmacro %}
