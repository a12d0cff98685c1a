{#-
  Snapshots (SCD Type 2) that carry process ids, after datwiz/dbt-snapshot-metadata and past it:
  every row carries the process id that inserted it and, once closed, the process id that
  closed it, with the snapshot times of both; deletion records too. The process id is the
  runner's (CDC_PROCESS_ID, set by `runner run`, or `--vars '{cdc_process_id: ...}'`), else dbt's
  invocation_id.

  Only snapshots that ask for it get it:
      config:
        meta:
          cdc: {process_ids: true}
  every other snapshot is built by dbt's own macros, unchanged.

  dbt's own logic is wrapped, not copied, where dispatch allows: the first-run select
  (build_snapshot_table) and the staging select (snapshot_staging_table) are dbt's, with four
  columns added around them. Only the merge is forked (snapshot_merge.sql), to set the closing
  process id in the same statement that closes the row.
-#}

{#- Does this snapshot ask for process ids (meta.cdc.process_ids)? -#}
{% macro snapshot_has_process_ids() %}
  {%- set asked = ((config.get('meta') or {}).get('cdc') or {}).get('process_ids', false) -%}
  {%- if asked is not sameas true and asked is not sameas false -%}
    {{ exceptions.raise_compiler_error("snapshot " ~ model.name ~ ": meta.cdc.process_ids must be true or false, got " ~ asked) }}
  {%- endif -%}
  {{ return(asked) }}
{% endmacro %}

{#- The runner's process id: `--vars '{cdc_process_id: ...}'`, else the CDC_PROCESS_ID environment
    variable (what `runner run` sets: a var that changes every run would make dbt parse the
    whole project again each time), else dbt's invocation_id. Read at execution, not parse. -#}
{% macro snapshot_process_id() %}
  {{ return(var('cdc_process_id', none) or env_var('CDC_PROCESS_ID', '') or invocation_id) }}
{% endmacro %}

{#- The four added columns, as select items: inserted now, not closed. -#}
{% macro snapshot_added_columns() %}
  {%- set lin = cdc.lineage_columns() -%}
  {{ cdc.sql_string(cdc.snapshot_process_id()) }} as {{ adapter.quote(lin.snapshot_insert_process_id) }},
  cast(null as {{ dbt.type_string() }}) as {{ adapter.quote(lin.snapshot_update_process_id) }},
  {{ snapshot_get_time() }} as {{ adapter.quote(lin.snapshot_inserted_at) }},
  cast(null as {{ dbt.type_timestamp() }}) as {{ adapter.quote(lin.snapshot_updated_at) }}
{%- endmacro %}

{#- The SET items the merge adds when it closes a row. -#}
{% macro snapshot_close_set() %}
  {%- set lin = cdc.lineage_columns() -%}
  {{ adapter.quote(lin.snapshot_update_process_id) }} = {{ cdc.sql_string(cdc.snapshot_process_id()) }},
  {{ adapter.quote(lin.snapshot_updated_at) }} = {{ snapshot_get_time() }}
{%- endmacro %}

{#- dbt 1.11 global_project default__build_snapshot_table, wrapped (spark, databricks,
    postgres and bigquery all use the default). -#}
{% macro default__build_snapshot_table(strategy, sql) %}
  {%- if not cdc.snapshot_has_process_ids() -%}
    {{ return(dbt.default__build_snapshot_table(strategy, sql)) }}
  {%- endif %}
  select cdc_snapshot.*,
    {{ cdc.snapshot_added_columns() }}
  from (
    {{ dbt.default__build_snapshot_table(strategy, sql) }}
  ) as cdc_snapshot
{% endmacro %}

{#- dbt 1.11 global_project default__snapshot_staging_table, wrapped (all four adapters). -#}
{% macro default__snapshot_staging_table(strategy, source_sql, target_relation) -%}
  {%- if not cdc.snapshot_has_process_ids() -%}
    {{ return(dbt.default__snapshot_staging_table(strategy, source_sql, target_relation)) }}
  {%- endif %}
  select cdc_staging.*,
    {{ cdc.snapshot_added_columns() }}
  from (
    {{ dbt.default__snapshot_staging_table(strategy, source_sql, target_relation) }}
  ) as cdc_staging
{%- endmacro %}
