{#- Small SQL pieces the apply paths (current state, history, snapshot, transactions) share:
    resetting a target's state, open history rows, key text, scratch tables, the time now. -#}

{#- Statements that forget this target's markers and tombstones: before (re)creating it. Only
    the state tables that hold something to forget get a DELETE: one query over the four first
    (a new target, the usual first build, has nothing in any of them). -#}
{% macro reset_statements(target_name, before=none) %}
  {%- set where = ' where ' ~ adapter.quote('target_table') ~ ' = ' ~ cdc.sql_string(target_name) -%}
  {%- set tables = [('applied_files', 'applied_at'), ('tombstones', 'deleted_at'),
                    ('history_deletes', 'applied_at'), ('held_files', 'updated_at')] -%}
  {%- set deletes = [] -%}
  {%- set counts = [] -%}
  {%- for name, written_at in tables -%}
    {%- set fence = '' if before is none else ' and unix_micros(' ~ adapter.quote(written_at) ~ ') < ' ~ before -%}
    {%- do deletes.append('delete from ' ~ cdc.state_relation(name) ~ where ~ fence) -%}
    {%- do counts.append('select ' ~ loop.index0 ~ ' as cdc_table from ' ~ cdc.state_relation(name) ~ where ~ fence) -%}
  {%- endfor -%}
  {%- if not execute -%}{{ return(deletes) }}{%- endif -%}
  {%- set held = run_query('select distinct cdc_table from (' ~ counts | join(' union all ') ~ ') as cdc_held').columns[0].values() | map('int') | list -%}
  {%- set statements = [] -%}
  {%- for i in held | sort -%}{%- do statements.append(deletes[i]) -%}{%- endfor -%}
  {{ return(statements) }}
{% endmacro %}

{#- A history row is open (current) when its valid_to is NULL or dbt_valid_to_current. -#}
{% macro _is_open(alias, valid_to, valid_to_current) -%}
  {%- if valid_to_current -%}
    ({{ alias }}.{{ valid_to }} is null or {{ alias }}.{{ valid_to }} = {{ valid_to_current }})
  {%- else -%}
    {{ alias }}.{{ valid_to }} is null
  {%- endif -%}
{%- endmacro %}

{#- A version's valid_to: `expr`, or dbt_valid_to_current when `expr` is NULL (still open). -#}
{% macro _valid_to_or_current(ctx, expr) -%}
  {%- if ctx.valid_to_current -%}coalesce({{ expr }}, {{ ctx.valid_to_current }}){%- else -%}{{ expr }}{%- endif -%}
{%- endmacro %}

{#- A key as one string: each part length-prefixed, so ('a|b', 'c') and ('a', 'b|c') differ. -#}
{% macro _key_text(alias, keys) %}
  {%- set s = dbt.type_string() -%}
  {%- for k in keys -%}
    cast(length(cast({{ alias }}.{{ k }} as {{ s }})) as {{ s }}) || ':' || cast({{ alias }}.{{ k }} as {{ s }})
    {{- " || '|' || " if not loop.last }}
  {%- endfor -%}
{% endmacro %}

{#- The select that creates an apply model's table empty, with the apply-only columns (and a
    history model's validity columns, typed as the sequence). -#}
{% macro empty_target_select(sql) %}
  {%- set history = cdc.is_history_model() -%}
  {%- set hist = cdc.history_settings() if history else {} -%}
  {%- set seq = 'cdc_model.' ~ adapter.quote(hist.get('valid_from') or cdc.lineage_columns().sequence) -%}
  select cdc_model.*
    {%- for col in cdc.lineage_on('applied') + (cdc.lineage_on('history') if history else []) %},
    {%- set name = hist.names.get(col.key, col.name) if history else col.name %}
    {%- if col.type == 'sequence' %}
    nullif({{ seq }}, {{ seq }}) as {{ adapter.quote(name) }}  {#- NULL, typed as the sequence (or valid_from) #}
    {%- else %}
    cast(null as {{ cdc.contract_type(col.type) }}) as {{ adapter.quote(name) }}
    {%- endif %}
    {%- endfor %}
  from (
    {{ sql }}
  ) as cdc_model
  where 1 = 0
{% endmacro %}

{#- Scratch tables for one apply: real tables on Spark destinations, temporary elsewhere.
    `catalog`: the scratch catalog (cdc.scratch_catalog), where the destination has one. -#}
{% macro scratch_relation(target, suffix, catalog=none) %}
  {{ return(adapter.dispatch('scratch_relation', 'cdc')(target, suffix, catalog)) }}
{% endmacro %}
{% macro default__scratch_relation(target, suffix, catalog=none) %}
  {{ return(api.Relation.create(identifier=target.identifier ~ '__cdc_' ~ suffix, type='table')) }}
{% endmacro %}
{#- Spark: real tables named for their build (dbt's invocation id): two builds of one model at
    once never read, replace or drop each other's. A build that dies leaves its own behind,
    which `runner maintain` drops a day later. In the scratch catalog when the session has one
    (then the name is text: `cdc_scratch.<schema>.<table>`), else in the target's schema. -#}
{% macro spark__scratch_relation(target, suffix, catalog=none) %}
  {%- set rel = target.incorporate(path={'identifier': target.identifier ~ '__cdc_' ~ suffix ~ '_' ~ cdc.build_tag()}) -%}
  {{ return(rel if catalog is none else catalog ~ '.' ~ rel) }}
{% endmacro %}

{#- The catalog scratch tables go to: on Spark, `cdc_scratch` when the session has a catalog of
    that name (profiles.example.yml: an Iceberg catalog of type hadoop in the project's state
    folder, whose DROP ... PURGE deletes the table's folder, where the session catalog's purge
    runs a Spark job that reads the table's metadata to find its files); none without it (a
    profile written before it), and elsewhere. Asked once per apply (one SET statement). -#}
{% macro scratch_catalog() %}
  {{ return(adapter.dispatch('scratch_catalog', 'cdc')()) }}
{% endmacro %}
{#- Its name (runner/destinations/spark/destination.py: SCRATCH_CATALOG). -#}
{% macro scratch_catalog_name() %}
  {{ return('cdc_scratch') }}
{% endmacro %}
{% macro default__scratch_catalog() %}
  {{ return(none) }}
{% endmacro %}
{% macro databricks__scratch_catalog() %}
  {{ return(none) }}
{% endmacro %}
{% macro spark__scratch_catalog() %}
  {%- if not execute or var('cdc_file_format', 'iceberg') != 'iceberg' -%}{{ return(none) }}{%- endif -%}
  {%- set name = cdc.scratch_catalog_name() -%}
  {%- set rows = run_query('set spark.sql.catalog.' ~ name).rows -%}
  {%- set value = (rows[0][1] if rows else '') | string -%}
  {{ return(name if value.strip() and value != '<undefined>' else none) }}
{% endmacro %}

{#- This build's tag in scratch names: its invocation id, 16 hex digits. -#}
{% macro build_tag() %}
  {{ return((invocation_id | replace('-', '') | lower)[:16]) }}
{% endmacro %}

{#- Every scratch table an apply may create (apply/statements.sql, the steps). -#}
{% macro scratch_suffixes() %}
  {{ return(['files', 'batch', 'truncate', 'dedupe']) }}
{% endmacro %}

{#- A scratch table's drop. On Iceberg with PURGE: a plain DROP TABLE forgets the table but
    keeps its data files, which would pile up in the warehouse with every apply. -#}
{% macro drop_scratch_sql(relation) %}
  {{ return(adapter.dispatch('drop_scratch_sql', 'cdc')(relation)) }}
{% endmacro %}
{% macro default__drop_scratch_sql(relation) %}
  {{ return('drop table if exists ' ~ relation) }}
{% endmacro %}
{% macro databricks__drop_scratch_sql(relation) %}
  {{ return('drop table if exists ' ~ relation) }}
{% endmacro %}
{% macro spark__drop_scratch_sql(relation) %}
  {{ return('drop table if exists ' ~ relation ~ (' purge' if var('cdc_file_format', 'iceberg') == 'iceberg' else '')) }}
{% endmacro %}

{% macro create_scratch_sql(relation, sql) %}
  {{ return(adapter.dispatch('create_scratch_sql', 'cdc')(relation, sql)) }}
{% endmacro %}
{% macro default__create_scratch_sql(relation, sql) %}
  {{ return('create temporary table ' ~ relation ~ ' as ' ~ sql) }}
{% endmacro %}
{% macro postgres__create_scratch_sql(relation, sql) %}
  {{ return('create temporary table ' ~ relation ~ ' on commit drop as ' ~ sql) }}
{% endmacro %}
{% macro bigquery__create_scratch_sql(relation, sql) %}
  {{ return('create temp table ' ~ relation ~ ' as ' ~ sql) }}
{% endmacro %}
{% macro spark__create_scratch_sql(relation, sql) %}
  {{ return('create or replace table ' ~ relation ~ cdc.table_format_clause() ~ ' as ' ~ sql) }}
{% endmacro %}

{% macro now_utc() %}
  {{ return(adapter.dispatch('now_utc', 'cdc')()) }}
{% endmacro %}
{% macro default__now_utc() %}{{ return(dbt.current_timestamp()) }}{% endmacro %}
{% macro postgres__now_utc() %}{{ return("(now() at time zone 'utc')") }}{% endmacro %}
