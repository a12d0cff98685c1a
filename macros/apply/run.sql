{#- What every adapter wrapper needs: the apply statements for this model's run. -#}

{#- `keys`: what cdc.unique_keys_state knew of the target's keys (none: check them). -#}
{% macro model_apply_statements(target, source, keys=none) %}
  {%- do cdc.create_state_tables() -%}
  {%- if not cdc.has_waiting_files(cdc.apply_entity(), cdc.target_name()) -%}
    {{ return([cdc.nothing_to_apply_sql()]) }}
  {%- endif -%}
  {%- set columns = adapter.get_columns_in_relation(target) -%}
  {%- set index = cdc.key_index_state(target) -%}
  {%- set known = (keys is not none and keys.known) or (index is not none and index.known) -%}
  {%- set dedupe = not cdc.is_history_model() and not known
      and cdc.target_has_duplicate_keys(target, cdc.apply_keys(), cdc.target_name()) -%}
  {{ return(cdc.apply_statements(target, source, columns, cdc.apply_keys(), cdc.apply_entity(), cdc.target_name(), dedupe,
      key_index=index is not none and index.create)) }}
{% endmacro %}

{#- First run or --full-refresh: forget this target's markers and tombstones, create the
    table empty, then apply every staged File. Runs the preparation now; returns the apply.
    `before` (the destination's clock, unix_micros, taken before the table was found absent):
    forget only what was written before then, never what another build that created the table
    meanwhile has written since. -#}
{% macro create_then_apply_statements(relation, sql, create_table_sql, before=none) %}
  {%- do cdc.create_state_tables() -%}
  {%- do cdc.check_rebuild_complete(cdc.apply_entity()) -%}
  {%- for stmt in cdc.reset_statements(cdc.target_name(), before) -%}
    {%- do run_query(stmt) -%}
  {%- endfor -%}
  {%- do run_query(create_table_sql) -%}
  {{ return(cdc.model_apply_statements(relation, '(' ~ sql ~ ')')) }}
{% endmacro %}

{#- The first build of an apply model's table where no lock can be held across statements
    (Spark, Databricks, BigQuery). dbt found the table absent when the build started; another
    build may have created it since. Asked again now: when it is there, the model is applied as
    an incremental run. When it is not, the table is created only if still absent (CREATE TABLE
    IF NOT EXISTS: a build that loses the race by a moment finds it and goes on to apply, which
    the markers make exactly once), and the markers and tombstones of a table that was dropped
    are forgotten only up to the time it was found absent. --full-refresh replaces the table,
    as dbt does. Returns the apply's statements (the reset and the CREATE already run). -#}
{% macro create_or_apply_statements(relation, sql, create_table_sql) %}
  {%- if should_full_refresh() or not execute -%}
    {{ return(cdc.create_then_apply_statements(relation, sql, create_table_sql)) }}
  {%- endif -%}
  {%- set before = cdc.now_micros() -%}
  {%- if cdc.relation_exists_now(relation) -%}
    {{ return(cdc.model_apply_statements(relation, '(' ~ sql ~ ')')) }}
  {%- endif -%}
  {%- set if_absent = modules.re.sub('^\\s*create\\s+(or\\s+replace\\s+)?table\\s', 'create table if not exists ',
      create_table_sql, flags=modules.re.IGNORECASE) -%}
  {{ return(cdc.create_then_apply_statements(relation, sql, if_absent, before)) }}
{% endmacro %}

{#- Whether `relation` exists now, asked of the destination (dbt's relation cache is filled
    when a build starts). -#}
{% macro relation_exists_now(relation) %}
  {{ return(adapter.dispatch('relation_exists_now', 'cdc')(relation)) }}
{% endmacro %}
{% macro postgres__relation_exists_now(relation) %}
  {{ return(cdc.postgres_relation_now(relation) is not none) }}
{% endmacro %}

{#- PostgreSQL: `relation` as it is in the catalog now (its type: table or view), or none. -#}
{% macro postgres_relation_now(relation) %}
  {%- set sql -%}
    select c.relkind from pg_catalog.pg_class as c
    join pg_catalog.pg_namespace as n on n.oid = c.relnamespace
    where n.nspname = {{ cdc.sql_string(relation.schema) }} and c.relname = {{ cdc.sql_string(relation.identifier) }}
  {%- endset -%}
  {%- set found = run_query(sql).columns[0].values() -%}
  {%- if not found -%}{{ return(none) }}{%- endif -%}
  {%- set kinds = {'v': 'view', 'm': 'materialized_view'} -%}
  {{ return(relation.incorporate(type=kinds.get(found[0], 'table'))) }}
{% endmacro %}
{% macro spark__relation_exists_now(relation) %}
  {%- set sql = 'show tables in ' ~ adapter.quote(relation.schema) ~ ' like ' ~ cdc.sql_string(relation.identifier | lower) -%}
  {{ return(run_query(sql).rows | length > 0) }}
{% endmacro %}
{% macro bigquery__relation_exists_now(relation) %}
  {{ return(adapter.get_bq_table(relation) is not none) }}
{% endmacro %}

{#- The destination's clock now, in microseconds since the epoch (Spark, Databricks, BigQuery). -#}
{% macro now_micros() %}
  {{ return(adapter.dispatch('now_micros', 'cdc')()) }}
{% endmacro %}
{% macro default__now_micros() %}
  {{ return(run_query('select unix_micros(' ~ cdc.now_utc() ~ ')').columns[0].values()[0] | int) }}
{% endmacro %}

{#- Spark destinations execute one statement per call: run all but the last, return the last
    for the materialization's `main` statement. Order is the guarantee here (no transaction). -#}
{% macro run_all_but_last(statements) %}
  {%- for stmt in statements[:-1] -%}
    {%- do run_query(stmt) -%}
  {%- endfor -%}
  {{ return(statements[-1]) }}
{% endmacro %}

{#- Spark and Databricks: the apply statements, then the scratch tables' drops, run in order;
    returns the last for `main`. `create_sql` set: the first-run path (create, then apply). -#}
{% macro spark_family_apply(target, source, create_sql=none) %}
  {%- set keys = none -%}
  {%- if create_sql is none -%}
    {%- set keys = cdc.unique_keys_state(target) -%}
    {%- set statements = cdc.model_apply_statements(target, source, keys) -%}
  {%- else -%}
    {#- a first build: its keys are unique if every snapshot of the table is its own -#}
    {%- set keys = cdc.unique_keys_from_creation() -%}
    {%- set statements = cdc.create_or_apply_statements(target, source, create_sql) -%}
  {%- endif -%}
  {%- if statements == [cdc.nothing_to_apply_sql()] -%}{{ return(statements[0]) }}{%- endif -%}
  {%- set drop_view = cdc.drop_batch_files_view_sql(target, cdc.entity_settings(cdc.apply_entity()).get('mode', 'cdc')) -%}
  {%- if drop_view -%}{%- do statements.append(drop_view) -%}{%- endif -%}
  {#- the scratch tables these statements make (named for this build: no other can exist),
      in the scratch catalog or in the target's schema -#}
  {%- set made = statements | join('\n') -%}
  {%- for suffix in cdc.scratch_suffixes() -%}
    {%- set scratch = cdc.scratch_relation(target, suffix) -%}
    {%- set elsewhere = cdc.scratch_relation(target, suffix, cdc.scratch_catalog_name()) -%}
    {%- if elsewhere in made -%}{%- do statements.append(cdc.drop_scratch_sql(elsewhere)) -%}
    {%- elif (scratch | string) in made -%}{%- do statements.append(cdc.drop_scratch_sql(scratch)) -%}{%- endif -%}
  {%- endfor -%}
  {#- with keys known (Spark on Iceberg): their mark right after the target's last write -#}
  {%- set writes = cdc.target_writes(statements, target) if keys is not none else {'count': 0, 'last': -1} -%}
  {%- set cut = writes.last + 1 if writes.last + 1 < statements | length else 0 -%}
  {%- for stmt in statements[:cut] -%}{%- do run_query(stmt) -%}{%- endfor -%}
  {%- if cut -%}{%- do cdc.record_unique_keys(target, keys, writes.count) -%}{%- endif -%}
  {{ return(cdc.run_all_but_last(statements[cut:])) }}
{% endmacro %}

{#- Does any staged File of `entity` lack a marker for this target? One small query over the
    manifest and the markers; when none does, the apply is one no-op statement instead of its
    scratch tables, MERGEs and markers insert (a `dbt build` with nothing new stays cheap). -#}
{% macro has_waiting_files(entity, target_name) %}
  {%- if not execute -%}{{ return(true) }}{%- endif -%}
  {%- set sql = 'select count(*) as cdc_waiting from (' ~ cdc.unmarked_files_sql(
      cdc.state_relation('staged_files'), cdc.state_relation('applied_files'),
      cdc.sql_string(entity), cdc.sql_string(target_name)) ~ ') as cdc_unmarked' -%}
  {%- set waiting = run_query(sql).columns[0].values()[0] -%}
  {{ return(waiting | int > 0) }}
{% endmacro %}

{#- The hashes of `entity`'s Files in the staged-files manifest `files` without a marker in
    `markers` for the table `target_table` (both rendered literals). -#}
{% macro unmarked_files_sql(files, markers, entity, target_table) %}
  {%- set q = adapter.quote -%}
  {%- set sql -%}
    select cdc_files.{{ q('file_hash') }}
    from {{ files }} as cdc_files
    where cdc_files.{{ q('entity') }} = {{ entity }}
      and cdc_files.{{ q('file_hash') }} not in (
        select cdc_markers.{{ q('file_hash') }} from {{ markers }} as cdc_markers
        where cdc_markers.{{ q('target_table') }} = {{ target_table }}
      )
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}

{% macro nothing_to_apply_sql() %}
  {{ return('select 1 as cdc_nothing_to_apply') }}
{% endmacro %}

{#- Built from the start (first run, --full-refresh), an apply model reads every staged File of
    its entity: refuse when `runner maintain`'s retention removed some Files' rows (the table
    would silently miss their changes), unless the build says it wants what is left:
    --vars '{cdc_rebuild_from_retained: true}'. Files staged with no rows are not counted.
    The staged rows' File hashes are made distinct before the NOT IN: Spark builds a NOT IN's
    subquery into one broadcast hash table (millions of rows otherwise, which at 20M rows
    exhausts the driver's heap), and PostgreSQL hashes it only when it fits work_mem. -#}
{% macro check_rebuild_complete(entity) %}
  {%- if not execute or var('cdc_rebuild_from_retained', false) -%}{{ return(none) }}{%- endif -%}
  {%- set staged = cdc.staging_relation(entity) -%}
  {%- if staged is none -%}{{ return(none) }}{%- endif -%}
  {%- set q = adapter.quote -%}
  {%- set sql -%}
    select count(*) as cdc_gone, min(cdc_files.{{ q('file_name') }}) as cdc_first,
           max(cdc_files.{{ q('file_name') }}) as cdc_last
    from {{ cdc.state_relation('staged_files') }} as cdc_files
    where cdc_files.{{ q('entity') }} = {{ cdc.sql_string(entity) }}
      and cdc_files.{{ q('staged_rows') }} > 0
      and cdc_files.{{ q('file_hash') }} not in (
        select distinct cdc_rows.{{ q(cdc.lineage_columns().file_hash) }} from {{ staged }} as cdc_rows
      )
  {%- endset -%}
  {%- set row = run_query(sql).rows[0] -%}
  {%- if row[0] | int > 0 -%}
    {{ exceptions.raise_compiler_error(
        "model " ~ model.name ~ " is built from the start but the staged rows of " ~ row[0]
        ~ " File(s) of " ~ entity ~ " are gone (runner maintain's retention; from " ~ row[1]
        ~ " to " ~ row[2] ~ "), so it would miss their changes. Keep the table (no "
        ~ "--full-refresh), or rebuild it from the Files that are left with "
        ~ "--vars '{cdc_rebuild_from_retained: true}'") }}
  {%- endif -%}
{% endmacro %}

{#- The staging table of `entity` (its source with meta.cdc), or none when not declared. -#}
{% macro staging_relation(entity) %}
  {%- for node in graph.sources.values() if node.name == entity -%}
    {%- if (node.meta or {}).get('cdc') or (node.config.meta or {}).get('cdc') -%}
      {{ return(source(node.source_name, node.name)) }}
    {%- endif -%}
  {%- endfor -%}
  {{ return(none) }}
{% endmacro %}
