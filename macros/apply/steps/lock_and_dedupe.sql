{#- Apply steps `lock` and `dedupe_target` (the order of all steps: apply/statements.sql). -#}

{#- Serialises applies of one table where the destination has locks: PostgreSQL takes a
    transaction-scoped advisory lock, so a second `dbt build` waits, then finds the markers and
    applies nothing. Spark, Databricks and BigQuery rely on their optimistic commits instead (a
    concurrent MERGE into the same table fails) and on the marker guard of insert_markers. -#}
{% macro apply_lock_sql(ctx) %}
  {{ return(adapter.dispatch('apply_lock_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_lock_sql(ctx) %}{{ return('') }}{% endmacro %}
{% macro postgres__apply_lock_sql(ctx) %}
  {{ return(cdc.postgres_apply_lock(ctx.target_name)) }}
{% endmacro %}
{#- The lock itself, by target name: also taken before the model's rows are selected
    (postgres__create_table_as), so that a build that waited reads what the other committed. -#}
{% macro postgres_apply_lock(target_name) %}
  {{ return('select pg_advisory_xact_lock(hashtextextended(' ~ cdc.sql_string('cdc apply ' ~ target_name) ~ ', 0))') }}
{% endmacro %}

{#- ADR-019: a target with duplicate keys (rows written before the apply, a manual insert, a
    legacy load) would make the MERGE fail (Spark, BigQuery) or update both rows (PostgreSQL).
    When, and only when, the aggregate finds some, the target is rewritten with one row per key
    first: the highest sequence, then the latest applied, then the later File and row (exact
    copies: any one), and a warning gives the count. Atomic on every destination: one DELETE
    in the PostgreSQL transaction, one INSERT OVERWRITE on Spark, inside the BigQuery script. -#}
{% macro apply_dedupe_target_sql(ctx) %}
  {%- if not ctx.dedupe -%}{{ return('') }}{%- endif -%}
  {{ return(adapter.dispatch('apply_dedupe_target_sql', 'cdc')(ctx)) }}
{% endmacro %}

{#- Does `target` hold a key more than once? One aggregate over its keys, run by the model's
    apply before it renders the steps (cdc.model_apply_statements); warns with the counts. -#}
{% macro target_has_duplicate_keys(target, keys, target_name) %}
  {%- if not execute -%}{{ return(false) }}{%- endif -%}
  {%- set quoted = [] -%}
  {%- for k in keys -%}{%- do quoted.append(adapter.quote(k)) -%}{%- endfor -%}
  {%- set check -%}
    select count(*) as cdc_keys, coalesce(sum(cdc_n), 0) as cdc_rows
    from (
      select count(*) as cdc_n from {{ target }} group by {{ quoted | join(', ') }} having count(*) > 1
    ) as cdc_dup
  {%- endset -%}
  {%- set found = run_query(check) -%}
  {%- set dup_keys = found.columns[0].values()[0] | int -%}
  {%- if dup_keys == 0 -%}{{ return(false) }}{%- endif -%}
  {%- set extra = (found.columns[1].values()[0] | int) - dup_keys -%}
  {%- do exceptions.warn("cdc apply of " ~ target_name ~ ": the target holds " ~ dup_keys
      ~ " keys more than once (" ~ extra ~ " extra rows); keeping one row per key (the highest "
      ~ "sequence, then the latest applied) before the MERGE") -%}
  {{ return(true) }}
{% endmacro %}

{#- PostgreSQL: a current-state target holds each key once by a unique index on its key
    columns. The apply creates it (no name given: PostgreSQL picks one that is free) at the end
    of the build that finds it missing, in the model's transaction, after any dedupe: on a new
    table after its first batch is loaded, on a table an earlier release made at its next
    apply. With the index, nothing outside the apply can put a key in twice, so the
    duplicate-keys aggregate is not run, and the apply's joins to the target can look its keys
    up. Key columns of a type without a btree order (json, arrays) get no index: their keys
    are counted at every apply. Returns none (history tables, not executing) or {'known': a
    unique index covers the keys, 'create': the apply creates one}. -#}
{% macro key_index_state(target) %}
  {{ return(adapter.dispatch('key_index_state', 'cdc')(target)) }}
{% endmacro %}
{% macro default__key_index_state(target) %}{{ return(none) }}{% endmacro %}
{% macro postgres__key_index_state(target) %}
  {%- if not execute or cdc.is_history_model() -%}{{ return(none) }}{%- endif -%}
  {%- set keys = [] -%}
  {%- for k in cdc.apply_keys() -%}{%- do keys.append(cdc.sql_string(k | lower)) -%}{%- endfor -%}
  {%- set rel = cdc.sql_string(adapter.quote(target.schema) ~ '.' ~ adapter.quote(target.identifier)) ~ '::regclass' -%}
  {%- set sql -%}
    select
      exists (
        select 1 from pg_catalog.pg_index as i
        where i.indrelid = {{ rel }} and i.indisunique and i.indisvalid and i.indpred is null
          and i.indexprs is null
          and (select array_agg(lower(a.attname::text)) from pg_catalog.pg_attribute as a
               where a.attrelid = i.indrelid and a.attnum = any(i.indkey)) <@ array[{{ keys | join(', ') }}]::text[]
      ) as cdc_known,
      not exists (
        select 1 from pg_catalog.pg_attribute as a
        join pg_catalog.pg_type as t on t.oid = a.atttypid
        where a.attrelid = {{ rel }} and lower(a.attname::text) = any(array[{{ keys | join(', ') }}]::text[])
          and not (t.typcategory in ('N', 'S', 'D', 'B') or t.typname = 'uuid')
      ) as cdc_indexable
  {%- endset -%}
  {%- set row = run_query(sql).rows[0] -%}
  {{ return({'known': row[0] is sameas true, 'create': row[0] is not sameas true and row[1] is sameas true}) }}
{% endmacro %}

{#- The unique index of key_index_state, when the build creates it: the apply's last statement. -#}
{% macro apply_key_index_sql(ctx) %}
  {%- if not ctx.get('key_index') -%}{{ return('') }}{%- endif -%}
  {{ return('create unique index on ' ~ ctx.target ~ ' (' ~ ctx.key_columns | join(', ') ~ ')') }}
{% endmacro %}

{#- Spark on Iceberg: the duplicate-keys aggregate reads every key of the target, at every
    build (about 17 to 29 s at 20M rows on two cores), though only a write from outside the
    apply can put a key in twice. So a large target (at least var cdc_key_check_rows rows, 1M
    by default) whose keys are known unique is not read: after each apply the table property
    `cdc.keys_unique_at` names its current snapshot when every snapshot since the one found
    unique is this build's own (same Spark application) or a compaction (operation `replace`);
    at the next build, when the current snapshot is that one, or reached from it by
    compactions only, the aggregate is skipped. Any other write in between (an INSERT, a
    MERGE, an UPDATE from another application, a rollback) makes the next build run it.
    Returns none (always check) or {'checked': the current snapshot, 'known': skip the check}. -#}
{% macro unique_keys_state(target) %}
  {{ return(adapter.dispatch('unique_keys_state', 'cdc')(target)) }}
{% endmacro %}
{% macro default__unique_keys_state(target) %}{{ return(none) }}{% endmacro %}
{% macro spark__unique_keys_state(target) %}
  {%- if not cdc._keys_can_be_marked() -%}{{ return(none) }}{%- endif -%}
  {%- set chain = cdc._iceberg_snapshots(target) -%}
  {%- if cdc._keys_counted_anyway(chain) -%}{{ return(none) }}{%- endif -%}
  {%- set marked = cdc._keys_unique_mark(target) -%}
  {{ return({'checked': chain.current,
             'known': marked is not none and cdc._reached_by(chain, chain.current, marked, none)}) }}
{% endmacro %}

{#- The state of a table this build creates (checked: '', its creation; `created`: the
    snapshots its CREATE may have made). -#}
{% macro unique_keys_from_creation() %}
  {{ return(adapter.dispatch('unique_keys_from_creation', 'cdc')()) }}
{% endmacro %}
{% macro default__unique_keys_from_creation() %}{{ return(none) }}{% endmacro %}
{% macro spark__unique_keys_from_creation() %}
  {{ return({'checked': '', 'known': false, 'created': 1} if cdc._keys_can_be_marked() else none) }}
{% endmacro %}

{#- This model's keys can be marked: a current-state apply model's Iceberg table. -#}
{% macro _keys_can_be_marked() %}
  {{ return(execute and not cdc.is_history_model() and config.get('file_format') == 'iceberg') }}
{% endmacro %}

{#- A table with no snapshot, or of fewer rows than var cdc_key_check_rows: its keys are
    counted at every apply (the count costs less than the mark's queries). -#}
{% macro _keys_counted_anyway(chain) %}
  {{ return(chain.current is none
      or (chain.by_id[chain.current].records | int) < (var('cdc_key_check_rows', 1000000) | int)) }}
{% endmacro %}

{#- Right after the apply's last write of the target: mark its current snapshot as holding
    each key once when every snapshot from it back to the one checked is a compaction or this
    Spark application's, and there are no more of those than the apply's `writes` of the
    target (a Thrift server's application is shared: another writer's snapshot would be one
    more). -#}
{% macro record_unique_keys(target, state, writes) %}
  {%- if state is none -%}{{ return('') }}{%- endif -%}
  {%- set chain = cdc._iceberg_snapshots(target) -%}
  {%- if cdc._keys_counted_anyway(chain) or chain.current == state.checked and state.known -%}{{ return('') }}{%- endif -%}
  {%- set app = run_query('set spark.app.id').rows[0][1] | string -%}
  {%- if cdc._reached_by(chain, chain.current, state.checked, app, writes + state.get('created', 0)) -%}
    {%- do run_query('alter table ' ~ target ~ ' set tblproperties (' ~ cdc.sql_string('cdc.keys_unique_at')
        ~ ' = ' ~ cdc.sql_string(chain.current) ~ ')') -%}
  {%- endif -%}
  {{ return('') }}
{% endmacro %}

{#- Of `statements`, those that write `target` (a MERGE, INSERT, DELETE or UPDATE of it):
    {'count': how many, 'last': the index of the last, or -1}. -#}
{% macro target_writes(statements, target) %}
  {%- set pattern = '(?i)\\b(?:merge\\s+into|insert\\s+(?:into|overwrite)(?:\\s+table)?|delete\\s+from|update)\\s+'
      ~ modules.re.escape(target | string) ~ '(?:\\s|$)' -%}
  {%- set found = namespace(count=0, last=-1) -%}
  {%- for stmt in statements -%}
    {%- if modules.re.search(pattern, stmt) -%}
      {%- set found.count = found.count + 1 -%}
      {%- set found.last = loop.index0 -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return({'count': found.count, 'last': found.last}) }}
{% endmacro %}

{#- The target's snapshots: {'current': the main branch's snapshot (or none), 'by_id': {id:
    {'parent', 'operation', 'records', 'app'}}}; ids as text prefixed with `s`, a first
    snapshot's parent ''. -#}
{% macro _iceberg_snapshots(target) %}
  {%- set sql -%}
    select concat('s', cast(s.snapshot_id as string)) as id, coalesce(concat('s', cast(s.parent_id as string)), '') as parent,
           s.operation, s.summary['total-records'] as records, s.summary['spark.app.id'] as app,
           concat('s', cast(r.snapshot_id as string)) as current_id
    from {{ target }}.snapshots as s
    cross join (select snapshot_id from {{ target }}.refs where name = 'main') as r
  {%- endset -%}
  {%- set rows = run_query(sql).rows -%}
  {%- set by_id = {} -%}
  {%- for r in rows -%}
    {%- do by_id.update({r[0] | string: {'parent': r[1], 'operation': r[2] | string, 'records': r[3], 'app': r[4] | string}}) -%}
  {%- endfor -%}
  {{ return({'current': (rows[0][5] | string) if rows else none, 'by_id': by_id}) }}
{% endmacro %}

{#- The snapshot id in the target's property cdc.keys_unique_at, or none. -#}
{% macro _keys_unique_mark(target) %}
  {%- set rows = run_query('show tblproperties ' ~ target ~ ' (' ~ cdc.sql_string('cdc.keys_unique_at') ~ ')').rows -%}
  {%- set value = (rows[0][1] | string) if rows else '' -%}
  {{ return(value if modules.re.match('^s[0-9]+$', value) else none) }}
{% endmacro %}

{#- Is `start` reached from snapshot `id` through parents that are compactions (`replace`) or,
    when `app` is given, at most `writes` snapshots written by that Spark application? -#}
{% macro _reached_by(chain, id, start, app, writes=0) %}
  {%- set walk = namespace(at=id, found=false, going=true, ours=0) -%}
  {%- for _ in range((chain.by_id | length) + 1) if walk.going -%}
    {%- if walk.at == start -%}
      {%- set walk.found = true -%}
      {%- set walk.going = false -%}
    {%- else -%}
      {%- set snap = chain.by_id.get(walk.at) -%}
      {%- set ours = snap is not none and snap.operation != 'replace' and app is not none and snap.app == app -%}
      {%- if ours -%}{%- set walk.ours = walk.ours + 1 -%}{%- endif -%}
      {%- if snap is none or not (snap.operation == 'replace' or ours) or walk.ours > writes -%}
        {%- set walk.going = false -%}
      {%- else -%}
        {%- set walk.at = snap.parent | string -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(walk.found) }}
{% endmacro %}

{#- The ranking that picks each key's surviving row. -#}
{% macro _survivor_rank(ctx, alias) -%}
  {%- set lin = ctx.lin -%}
  row_number() over (
    partition by {% for k in ctx.key_columns %}{{ alias }}.{{ k }}{{ ', ' if not loop.last }}{% endfor %}
    order by {{ alias }}.{{ lin.sequence }} desc nulls last, {{ alias }}.{{ lin.applied_at }} desc nulls last,
      {{ alias }}.{{ lin.file_hash }} desc nulls last, {{ alias }}.{{ lin.row_number }} desc nulls last
  )
{%- endmacro %}

{#- The target's columns (all of them, in order), quoted. -#}
{% macro _target_column_list(ctx) -%}
  {%- for c in ctx.all_columns %}{{ adapter.quote(c) }}{{ ', ' if not loop.last }}{% endfor -%}
{%- endmacro %}

{% macro default__apply_dedupe_target_sql(ctx) %}
  {%- set cols = cdc._target_column_list(ctx) -%}
  {%- set keep = cdc.scratch_relation(ctx.target, 'dedupe', ctx.scratch_catalog) -%}
  {%- set sql -%}
    {{ cdc.create_scratch_sql(keep, 'select ' ~ cols ~ ' from (select cdc_t.*, ' ~ cdc._survivor_rank(ctx, 'cdc_t')
        ~ ' as cdc__rank from ' ~ ctx.target ~ ' as cdc_t) as cdc_ranked where cdc__rank = 1') }};
    delete from {{ ctx.target }} where true;
    insert into {{ ctx.target }} ({{ cols }}) select {{ cols }} from {{ keep }}
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
{% macro postgres__apply_dedupe_target_sql(ctx) %}
  {%- set sql -%}
    delete from {{ ctx.target }} where ctid in (
      select cdc_ranked.cdc_row from (
        select cdc_t.ctid as cdc_row, {{ cdc._survivor_rank(ctx, 'cdc_t') }} as cdc__rank
        from {{ ctx.target }} as cdc_t
      ) as cdc_ranked
      where cdc_ranked.cdc__rank > 1
    )
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
{% macro spark__apply_dedupe_target_sql(ctx) %}
  {%- set cols = cdc._target_column_list(ctx) -%}
  {%- set sql -%}
    insert overwrite table {{ ctx.target }}
    select {{ cols }} from (
      select cdc_t.*, {{ cdc._survivor_rank(ctx, 'cdc_t') }} as cdc__rank from {{ ctx.target }} as cdc_t
    ) as cdc_ranked
    where cdc_ranked.cdc__rank = 1
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
