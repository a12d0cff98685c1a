{#- The state tables (common/contract.sql): the staged-files manifest, the Applied File Markers and
    the tombstones, in one schema for the runner and dbt alike. They are created by the apply
    path itself (and by `runner ingest` for the manifest), never by a project-wide hook, so a
    project that installs this package sees dbt's results unchanged apart from its apply models. -#}

{#- The state schema: `vars: {cdc_state_schema: ...}` in dbt_project.yml (the runner reads the same
    var), else the target's schema. The source cdc_state (models/cdc_state.yml) says the same. -#}
{% macro state_schema() %}
  {{ return(var('cdc_state_schema', target.schema)) }}
{% endmacro %}

{#- Creates the state tables that are missing. Called by every apply before it reads them;
    `dbt run-operation cdc.create_state_tables` does the same by hand. -#}
{% macro create_state_tables() %}
  {{ return(adapter.dispatch('create_state_tables', 'cdc')()) }}
{% endmacro %}

{% macro default__create_state_tables() %}
  {%- if not execute -%}{{ return('') }}{%- endif -%}
  {%- for name, spec in cdc.state_tables().items() -%}
    {%- set rel = cdc.state_relation(name) -%}
    {%- if adapter.get_relation(database=rel.database, schema=rel.schema, identifier=rel.identifier) is none -%}
      {%- do adapter.create_schema(api.Relation.create(database=rel.database, schema=rel.schema)) -%}
      {%- do run_query(cdc._state_table_ddl(rel, spec)) -%}
      {#- known to dbt's relation cache from now on, so the model's next call creates nothing
          (not on PostgreSQL below: there the table is gone if the model's transaction rolls back) -#}
      {%- do adapter.cache_added(rel.incorporate(type='table')) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return('') }}
{% endmacro %}

{#- PostgreSQL: inside the model's transaction, with a unique index on each table's key, so that
    of two applies that got past every other guard the second fails instead of applying twice.
    Only when a table is missing, and then under a lock: two first applies at once must not both
    create it (the lock is held to the commit, so it is never taken once the tables exist). -#}
{% macro postgres__create_state_tables() %}
  {%- if not execute -%}{{ return('') }}{%- endif -%}
  {%- set missing = [] -%}
  {%- for name, spec in cdc.state_tables().items() -%}
    {%- set rel = cdc.state_relation(name) -%}
    {%- if adapter.get_relation(database=rel.database, schema=rel.schema, identifier=rel.identifier) is none -%}
      {%- do missing.append((rel, spec)) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if missing -%}
    {%- do run_query("select pg_advisory_xact_lock(hashtextextended('cdc state tables', 0))") -%}
  {%- endif -%}
  {%- for rel, spec in missing -%}
    {%- do run_query('create schema if not exists ' ~ adapter.quote(rel.schema)) -%}
    {%- do run_query(cdc._state_table_ddl(rel, spec)) -%}
    {%- if spec.key -%}
      {%- set cols = [] -%}
      {%- for k in spec.key -%}{%- do cols.append(adapter.quote(k)) -%}{%- endfor -%}
      {%- do run_query('create unique index if not exists ' ~ adapter.quote(rel.identifier ~ '__key')
          ~ ' on ' ~ rel ~ ' (' ~ cols | join(', ') ~ ')') -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return('') }}
{% endmacro %}

{#- CREATE TABLE for one state table, its columns and types from the contract. -#}
{% macro _state_table_ddl(relation, spec) %}
  {%- set ddl -%}
    create table if not exists {{ relation }} (
      {%- for col, type in spec.columns.items() %}
      {{ adapter.quote(col) }} {{ cdc.contract_type(type) }}{{ ',' if not loop.last }}
      {%- endfor %}
    ){{ cdc.table_format_clause() }}{{ cdc.state_table_partition_clause(spec) }}{{ cdc.state_table_properties_clause() }}
  {%- endset -%}
  {{ return(ddl) }}
{% endmacro %}

{#- The state tables are shared by the applies of every entity. On Iceberg they are written
    merge-on-read: a copy-on-write MERGE re-reads the table between planning and its runtime
    file filter, and fails when another entity's apply committed to it in between (the catalog
    keeps no table cache, so that long-lived processes see the others' commits). Merge-on-read
    has no such step and keeps the serializable check: two applies of one table adding the same
    marker still conflict. Every apply commits to them, so a commit retries more often than
    Iceberg's default 4 times when other applies keep committing in between (the catalog then
    answers "metadata location has changed"; a retry re-reads the table and re-checks for
    conflicts). They are partitioned by their first key column (the target table; the
    manifest's entity): Iceberg's conflict check then looks only at what another apply added to
    the same target, so the applies of one build run at once (threads). The runner makes them
    alike before dbt runs (runner/destinations/spark/destination.py, STATE_TABLE_PROPERTIES). -#}
{% macro state_table_properties() %}
  {{ return(adapter.dispatch('state_table_properties', 'cdc')()) }}
{% endmacro %}
{% macro default__state_table_properties() %}{{ return({}) }}{% endmacro %}
{% macro spark__state_table_properties() %}
  {%- if var('cdc_file_format', 'iceberg') != 'iceberg' -%}{{ return({}) }}{%- endif -%}
  {%- set props = cdc.merge_on_read_properties() -%}
  {%- do props.update({'commit.retry.num-retries': '20'}) -%}
  {{ return(props) }}
{% endmacro %}

{#- Iceberg's row-level writes as delete files (the state tables, the apply targets). -#}
{% macro merge_on_read_properties() %}
  {{ return({'write.merge.mode': 'merge-on-read', 'write.update.mode': 'merge-on-read',
             'write.delete.mode': 'merge-on-read'}) }}
{% endmacro %}
{% macro databricks__state_table_properties() %}{{ return({}) }}{% endmacro %}

{% macro state_table_partition_clause(spec) %}
  {{ return(adapter.dispatch('state_table_partition_clause', 'cdc')(spec)) }}
{% endmacro %}
{% macro default__state_table_partition_clause(spec) %}{{ return('') }}{% endmacro %}
{% macro spark__state_table_partition_clause(spec) %}
  {%- if var('cdc_file_format', 'iceberg') != 'iceberg' -%}{{ return('') }}{%- endif -%}
  {{ return(' partitioned by (' ~ adapter.quote(spec.key[0]) ~ ')') }}
{% endmacro %}
{% macro databricks__state_table_partition_clause(spec) %}{{ return('') }}{% endmacro %}

{% macro state_table_properties_clause() %}
  {{ return(cdc.tblproperties_sql(cdc.state_table_properties())) }}
{% endmacro %}

{#- ` tblproperties ('k' = 'v', ...)` of a mapping, '' for an empty one. -#}
{% macro tblproperties_sql(props) %}
  {%- if not props -%}{{ return('') }}{%- endif -%}
  {%- set pairs = [] -%}
  {%- for k, v in props.items() | sort -%}
    {%- do pairs.append(cdc.sql_string(k) ~ ' = ' ~ cdc.sql_string(v | string)) -%}
  {%- endfor -%}
  {{ return(' tblproperties (' ~ pairs | join(', ') ~ ')') }}
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
