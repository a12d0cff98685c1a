{#-
  The apply: an orchestrating macro over named steps, each dispatched, so an adapter (or a
  project) overrides one step without forking the others. The steps, in order:

    lock              serialise applies of one table where the destination has locks;
    dedupe_target     only when the target holds duplicate keys (a legacy table, a manual
                      insert: ADR-019): keep one row per key, the highest sequence, then the
                      latest applied (the check, one aggregate over the keys, runs before the
                      statements are rendered: cdc.target_has_duplicate_keys, and warns);
    batch_files       the Files staged for this entity without a marker for this target;
    truncate          only when the entity declares a truncate operation (T): the batch's
                      last truncate, if newer than the table's watermark;
    classify          their rows' last change per key, classified against the target and the
                      tombstones (insert, update, delete, stale); with partial updates
                      (null_means: unchanged), an unchanged column filled from the key's
                      earlier changes or its target row;
    truncate_target   with a truncate in the batch: delete the target rows not newer than it;
    merge_target      MERGE into the target: insert new keys, update or delete only with a
                      newer sequence;
    merge_tombstones  remember each applied delete's key and sequence, forget it on re-insert;
                      a truncate is remembered as the table's watermark (an empty key);
    insert_markers    one Applied File Marker per File, with its row counts (a truncate's
                      File: the rows it removed are in rows_deleted).

  The adapter wrappers (spark.sql, databricks.sql) run the statements in order, or as one
  transaction (postgres.sql, bigquery.sql). Replaying them after a crash anywhere gives the same
  target: every change is compared with the sequence already in the target or its tombstone,
  so an applied change is "stale" the second time.

  Every step takes one argument, the apply context (cdc._apply_context): the relations, the
  quoted names and the rendered literals it needs. Each returns one SQL statement, or '' for
  none.
-#}

{% macro apply_statements(target, source, columns, keys, entity, target_name, dedupe=false) %}
  {%- set ctx = cdc._apply_context(target, source, columns, keys, entity, target_name) -%}
  {%- do ctx.update({'dedupe': dedupe and not ctx.history}) -%}
  {%- if ctx.mode == 'snapshot' -%}
    {{ return(cdc.apply_snapshot_statements(ctx)) }}
  {%- elif ctx.history -%}
    {{ return(cdc.apply_history_statements(ctx)) }}
  {%- endif -%}
  {%- set statements = [] -%}
  {%- for sql in [
      cdc.apply_lock_sql(ctx),
      cdc.apply_dedupe_target_sql(ctx),
      cdc.apply_batch_files_sql(ctx),
      cdc.apply_truncate_sql(ctx),
      cdc.apply_classify_sql(ctx),
      cdc.apply_truncate_target_sql(ctx),
      cdc.apply_merge_target_sql(ctx),
      cdc.apply_merge_tombstones_sql(ctx),
      cdc.apply_insert_markers_sql(ctx),
      cdc.apply_held_files_sql(ctx),
  ] if sql | trim -%}
    {%- do statements.append(sql | trim) -%}
  {%- endfor -%}
  {{ return(statements) }}
{% endmacro %}

{#- What the steps share. Arguments: target (relation), source (a relation or a parenthesised
    select with the model's columns), columns (the target's columns, api.Column), keys (the
    unique_key's columns), entity (its name in the staged-files manifest), target_name (the
    markers' and tombstones' key for this table). -#}
{% macro _apply_context(target, source, columns, keys, entity, target_name) %}
  {%- set q = adapter.quote -%}
  {%- set by_name = {} -%}
  {%- for c in columns -%}{%- do by_name.update({c.name | lower: c}) -%}{%- endfor -%}
  {%- set lin = cdc.lineage_columns() -%}
  {%- set settings = cdc.entity_settings(entity) -%}
  {%- set mode = settings.get('mode', 'cdc') -%}
  {%- set required = [] -%}
  {%- for col in cdc.lineage_on('staged', mode) -%}{%- do required.append(col.name) -%}{%- endfor -%}
  {%- for required_name in required + (keys | map('lower') | list) -%}
    {%- if required_name | lower not in by_name -%}
      {{ exceptions.raise_compiler_error(
          "apply of " ~ target_name ~ ": column " ~ required_name ~ " is missing from the model; "
          ~ "select the key columns and {{ cdc.lineage_select() }} from cdc.unapplied(...)") }}
    {%- endif -%}
  {%- endfor -%}
  {%- set applied = cdc.lineage_on('applied') -%}
  {%- set history = cdc.is_history_model() -%}
  {%- set hist = cdc.history_settings() if history else {} -%}
  {%- if history and mode == 'snapshot' and hist.valid_from -%}
    {{ exceptions.raise_compiler_error("model " ~ target_name ~ ": meta.cdc.valid_from is for change entities; "
        ~ "a snapshot entity's versions are valid from their extract's effective date") }}
  {%- endif -%}
  {%- set applied_names = cdc.lineage_on('applied') | map(attribute='name') | list -%}
  {%- if history -%}
    {%- do lin.update(hist.names) -%}
    {%- do applied_names.extend(hist.names.values()) -%}
    {%- for name in hist.names.values() if name | lower not in by_name -%}
      {{ exceptions.raise_compiler_error("history model " ~ target_name ~ ": column " ~ name ~ " is missing "
          ~ "from the table (renamed history columns need --full-refresh)") }}
    {%- endfor -%}
  {%- endif -%}
  {%- set valid_from = hist.get('valid_from') or lin.sequence -%}
  {%- if valid_from | lower not in by_name -%}
    {{ exceptions.raise_compiler_error("history model " ~ target_name ~ ": meta.cdc.valid_from names "
        ~ valid_from ~ ", which the model does not select") }}
  {%- endif -%}
  {%- set invocation = cdc.sql_string(invocation_id) -%}
  {%- set now = cdc.now_utc() -%}
  {%- set applied_values = {'invocation_id': invocation, 'applied_at': now} -%}
  {%- set applied_set = [] -%}
  {%- for col in applied -%}
    {%- if col.key not in applied_values -%}
      {{ exceptions.raise_compiler_error("cdc contract: the apply cannot fill " ~ col.name
          ~ " (no value named " ~ col.key ~ "; it knows: invocation_id, applied_at)") }}
    {%- endif -%}
    {%- do applied_set.append({'column': q(col.name), 'value': applied_values[col.key]}) -%}
  {%- endfor -%}
  {%- set quoted_lin = {} -%}
  {%- for key, name in lin.items() -%}{%- do quoted_lin.update({key: q(name)}) -%}{%- endfor -%}
  {%- set quoted_keys = [] -%}
  {%- for k in keys -%}{%- do quoted_keys.append(q(by_name[k | lower].name)) -%}{%- endfor -%}
  {%- set model_columns = [] -%}
  {%- for c in columns if (c.name | lower) not in applied_names -%}{%- do model_columns.append(q(c.name)) -%}{%- endfor -%}
  {%- set changes = cdc.change_settings(entity) if mode != 'snapshot' else {'unchanged': [], 'truncates': false} -%}
  {%- set partial = [] -%}
  {%- for c in columns if (c.name | lower) in changes.unchanged and (c.name | lower) not in (keys | map('lower') | list) -%}
    {%- do partial.append({'column': q(c.name), 'value': q('cdc__v' ~ loop.index), 'fill': q('cdc__fill' ~ loop.index)}) -%}
  {%- endfor -%}
  {%- set ledger = cdc.model_ledger(entity) if mode == 'cdc' else none -%}
  {%- set current = target -%}
  {%- if history -%}
    {%- set current = '(select * from ' ~ target ~ ' as cdc_open where '
        ~ cdc._is_open('cdc_open', q(lin.valid_to), hist.valid_to_current) ~ ')' -%}
  {%- endif -%}
  {{ return({
      'target': target,
      'current': current,
      'history': history,
      'source': source,
      'key_columns': quoted_keys,
      'model_columns': model_columns,
      'all_columns': columns | map(attribute='name') | list,
      'applied_set': applied_set,
      'lin': quoted_lin,
      'sequence_type': by_name[lin.sequence].data_type,
      'valid_from': q(by_name[valid_from | lower].name),
      'time_type': by_name[valid_from | lower].data_type,
      'hard_deletes': hist.get('hard_deletes'),
      'valid_to_current': hist.get('valid_to_current'),
      'history_deletes': cdc.state_relation('history_deletes'),
      'mode': mode,
      'partial': partial,
      'truncates': changes.truncates,
      'truncate': cdc.scratch_relation(target, 'truncate'),
      'kind': settings.get('snapshot_kind'),
      'entity': cdc.sql_string(entity),
      'this_table': cdc.sql_string(target_name),
      'target_name': target_name,
      'invocation': invocation,
      'now': now,
      'files': cdc.state_relation('staged_files'),
      'markers': cdc.state_relation('applied_files'),
      'tombstones': cdc.state_relation('tombstones'),
      'batch_files': cdc.scratch_relation(target, 'files'),
      'batch': cdc.scratch_relation(target, 'batch'),
      'ledger': ledger,
      'held_files': cdc.state_relation('held_files'),
      'staged': cdc.staged_relation(entity) if ledger is not none else none,
      'tx_column': q(cdc.transaction_fields(entity).tx) if ledger is not none else none,
  }) }}
{% endmacro %}

{#- Serialises applies of one table where the destination has locks: PostgreSQL takes a
    transaction-scoped advisory lock, so a second `dbt build` waits, then finds the markers and
    applies nothing. Spark, Databricks and BigQuery rely on their optimistic commits instead (a
    concurrent MERGE into the same table fails) and on the marker guard of insert_markers. -#}
{% macro apply_lock_sql(ctx) %}
  {{ return(adapter.dispatch('apply_lock_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_lock_sql(ctx) %}{{ return('') }}{% endmacro %}
{% macro postgres__apply_lock_sql(ctx) %}
  {{ return('select pg_advisory_xact_lock(hashtextextended(' ~ cdc.sql_string('cdc apply ' ~ ctx.target_name) ~ ', 0))') }}
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
  {%- set keep = cdc.scratch_relation(ctx.target, 'dedupe') -%}
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

{#- The Files of this batch. A File with rows must have them in the source (so a File staged
    while this runs waits for the next run); a File without rows needs none. -#}
{% macro apply_batch_files_sql(ctx) %}
  {{ return(adapter.dispatch('apply_batch_files_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_batch_files_sql(ctx) %}
  {%- set q = adapter.quote -%}
  {%- set sql -%}
    select cdc_files.{{ q('file_hash') }}, cdc_files.{{ q('file_name') }}, cdc_files.{{ q('process_id') }},
      coalesce(cdc_rows.n, 0) as {{ q('cdc__rows') }}
      {%- if ctx.ledger is not none %},
      coalesce(cdc_held.n, 0) as {{ q('cdc__held') }}
      {%- endif %}
    from {{ ctx.files }} as cdc_files
    left join (
      select cdc_src.{{ ctx.lin.file_hash }} as cdc_file_hash, count(*) as n
      from {{ ctx.source }} as cdc_src
      group by cdc_src.{{ ctx.lin.file_hash }}
    ) as cdc_rows on cdc_rows.cdc_file_hash = cdc_files.{{ q('file_hash') }}
    {%- if ctx.ledger is not none %}
    {#- A group member's rows of transactions neither released nor quarantined: the File
        keeps no marker while it has some, so that the next build applies them. #}
    left join {{ cdc.held_rows_sql(ctx, 'count(*)') }} as cdc_held
      on cdc_held.cdc_file_hash = cdc_files.{{ q('file_hash') }}
    {%- endif %}
    where cdc_files.{{ q('entity') }} = {{ ctx.entity }}
      and cdc_files.{{ q('file_hash') }} not in (
        select cdc_markers.{{ q('file_hash') }} from {{ ctx.markers }} as cdc_markers
        where cdc_markers.{{ q('target_table') }} = {{ ctx.this_table }}
      )
      and (cdc_files.{{ q('staged_rows') }} = 0 or cdc_rows.n > 0
        {%- if ctx.ledger is not none %} or cdc_held.n is null{% endif %})
  {%- endset -%}
  {{ return(cdc.create_scratch_sql(ctx.batch_files, sql)) }}
{% endmacro %}

{#- The batch: the last change per key (ties: later File, later row), classified against the
    target row and the key's tombstone. The earlier changes of a key are not kept: the markers
    count them from the batch Files' row counts.
    Partial updates (ctx.partial: null_means: unchanged): a column the last change leaves NULL
    takes the last value set since the key's last insert or delete among the batch's changes
    newer than the target row, else the target row's. A truncate (ctx.truncates): changes not
    newer than the batch's truncate or the table's watermark are stale, and so are target rows
    (apply_truncate_target_sql deletes them). -#}
{% macro apply_classify_sql(ctx) %}
  {{ return(adapter.dispatch('apply_classify_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_classify_sql(ctx) %}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {%- set on_keys = cdc._on_keys(ctx.key_columns, 'cdc_dest', 'cdc_changes') -%}
  {%- set sql -%}
    with cdc_changes as (
      select
        cdc_src.*,{% if ctx.truncates %} cdc_trunc.{{ q('cdc__watermark') }},{% endif %}
        row_number() over (
          partition by {% for k in ctx.key_columns %}cdc_src.{{ k }}{{ ', ' if not loop.last }}{% endfor %}
          order by cdc_src.{{ lin.sequence }} desc, cdc_src.{{ lin.file_hash }} desc,
                   cdc_src.{{ lin.row_number }} desc
        ) as {{ q('cdc__rank') }}
      from {{ ctx.source }} as cdc_src
      {{ cdc._after_truncates(ctx, 'cdc_src') }}
      where cdc_src.{{ lin.file_hash }} in (select {{ q('file_hash') }} from {{ ctx.batch_files }})
      {%- if ctx.truncates %}
        and cdc_src.{{ lin.operation }} <> 'T'
        and (cdc_trunc.{{ q('cdc__watermark') }} is null
             or cdc_src.{{ lin.sequence }} > cdc_trunc.{{ q('cdc__watermark') }})
      {%- endif %}
    ){% if ctx.partial %},
    {{ cdc._partial_fill_ctes(ctx) }}{% endif %}
    select
      {%- if ctx.partial %}
      {%- for c in ctx.model_columns %}
      {%- set p = ctx.partial | selectattr('column', 'equalto', c) | first %}
      {%- if p %}
      case when cdc_fill.{{ q('cdc__reset') }} is null then coalesce(cdc_fill.{{ p.fill }}, cdc_dest.{{ c }})
           else cdc_fill.{{ p.fill }} end as {{ c }},
      {%- else %}
      cdc_changes.{{ c }},
      {%- endif %}
      {%- endfor %}
      {%- else %}
      cdc_changes.*,
      {%- endif %}
      {{ cdc._key_text('cdc_changes', ctx.key_columns) }} as {{ q('cdc__key_text') }},
      case
        when cdc_dest.{{ lin.sequence }} is not null
             and cdc_changes.{{ lin.sequence }} <= cdc_dest.{{ lin.sequence }} then 'stale'
        when cdc_tomb.{{ q('sequence_text') }} is not null
             and cdc_changes.{{ lin.sequence }} <= cast(cdc_tomb.{{ q('sequence_text') }} as {{ ctx.sequence_type }}) then 'stale'
        when cdc_changes.{{ lin.operation }} = 'D' then 'delete'
        when cdc_dest.{{ lin.sequence }} is not null then 'update'
        else 'insert'
      end as {{ q('cdc__action') }}
    from cdc_changes
    {{ cdc._dest_and_tombstone(ctx, 'cdc_changes') }}
    {%- if ctx.partial %}
    left join cdc_fill
      on {{ cdc._on_keys(ctx.key_columns, 'cdc_fill', 'cdc_changes') }}
    {%- endif %}
    where cdc_changes.{{ q('cdc__rank') }} = 1
  {%- endset -%}
  {{ return(cdc.create_scratch_sql(ctx.batch, sql)) }}
{% endmacro %}

{#- `a.k = b.k and ...` over the key columns. -#}
{% macro _on_keys(keys, a, b) -%}
  {%- for k in keys %}{{ a }}.{{ k }} = {{ b }}.{{ k }}{{ ' and ' if not loop.last }}{% endfor -%}
{%- endmacro %}

{#- The joins every change needs to be classified: the target row of its key (alias cdc_dest;
    rows not newer than the truncate watermark count as gone) and its key's tombstone
    (cdc_tomb). -#}
{% macro _dest_and_tombstone(ctx, alias) -%}
  {%- set q, lin = adapter.quote, ctx.lin -%}
    left join {{ ctx.target }} as cdc_dest
      on {{ cdc._on_keys(ctx.key_columns, 'cdc_dest', alias) }}
      {%- if ctx.truncates %}
      and ({{ alias }}.{{ q('cdc__watermark') }} is null or cdc_dest.{{ lin.sequence }} > {{ alias }}.{{ q('cdc__watermark') }})
      {%- endif %}
    left join {{ ctx.tombstones }} as cdc_tomb
      on cdc_tomb.{{ q('target_table') }} = {{ ctx.this_table }}
      and cdc_tomb.{{ q('key_text') }} = {{ cdc._key_text(alias, ctx.key_columns) }}
{%- endmacro %}

{#- With truncates declared: the one-row watermark (the newer of the batch's truncate and the
    table's last), joined to every change as cdc_trunc. -#}
{% macro _after_truncates(ctx, alias) -%}
  {%- if not ctx.truncates -%}{{ return('') }}{%- endif -%}
  {%- set q = adapter.quote -%}
    cross join (
      select max(cdc_w.{{ q('cdc__seq') }}) as {{ q('cdc__watermark') }}
      from (
        select cdc_cut.{{ q('cdc__truncate_seq') }} as {{ q('cdc__seq') }} from {{ ctx.truncate }} as cdc_cut
        union all
        select cast(cdc_wm.{{ q('sequence_text') }} as {{ ctx.sequence_type }}) from {{ ctx.tombstones }} as cdc_wm
        where cdc_wm.{{ q('target_table') }} = {{ ctx.this_table }} and cdc_wm.{{ q('key_text') }} = ''
      ) as cdc_w
    ) as cdc_trunc
{%- endmacro %}

{#- Partial updates: per key, over the batch's changes newer than the target row and the
    tombstone (cdc_relevant, numbered in order), the position of the last insert or delete
    (cdc__reset) and, per unchanged-able column, its last non-NULL value from there on. -#}
{% macro _partial_fill_ctes(ctx) -%}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {%- set keys = ctx.key_columns -%}
    cdc_relevant as (
      select cdc_changes.*,
        row_number() over (
          partition by {% for k in keys %}cdc_changes.{{ k }}{{ ', ' if not loop.last }}{% endfor %}
          order by cdc_changes.{{ lin.sequence }}, cdc_changes.{{ lin.file_hash }}, cdc_changes.{{ lin.row_number }}
        ) as {{ q('cdc__pos') }}
      from cdc_changes
      {{ cdc._dest_and_tombstone(ctx, 'cdc_changes') }}
      where (cdc_dest.{{ lin.sequence }} is null or cdc_changes.{{ lin.sequence }} > cdc_dest.{{ lin.sequence }})
        and (cdc_tomb.{{ q('sequence_text') }} is null
             or cdc_changes.{{ lin.sequence }} > cast(cdc_tomb.{{ q('sequence_text') }} as {{ ctx.sequence_type }}))
    ),
    cdc_reset as (
      select {% for k in keys %}{{ k }}, {% endfor %}
        max(case when {{ lin.operation }} in ('I', 'D') then {{ q('cdc__pos') }} end) as {{ q('cdc__reset') }}
      from cdc_relevant
      group by {% for k in keys %}{{ k }}{{ ', ' if not loop.last }}{% endfor %}
    ),
    cdc_fill as (
      select {% for k in keys %}cdc_relevant.{{ k }}, {% endfor %}cdc_reset.{{ q('cdc__reset') }},
      {%- for p in ctx.partial %}
        {{ cdc.last_non_null('cdc_relevant.' ~ p.column,
            'cdc_relevant.' ~ q('cdc__pos') ~ ' >= coalesce(cdc_reset.' ~ q('cdc__reset') ~ ', 0)',
            'cdc_relevant.' ~ q('cdc__pos')) }} as {{ p.fill }}{{ ',' if not loop.last }}
      {%- endfor %}
      from cdc_relevant
      inner join cdc_reset on {{ cdc._on_keys(keys, 'cdc_reset', 'cdc_relevant') }}
      group by {% for k in keys %}cdc_relevant.{{ k }}, {% endfor %}cdc_reset.{{ q('cdc__reset') }}
    )
{%- endmacro %}

{#- An aggregate: the value of `column` on the row of highest `position` among those where
    `condition` holds and `column` is not NULL (NULL when there is none). -#}
{% macro last_non_null(column, condition, position) %}
  {{ return(adapter.dispatch('last_non_null', 'cdc')(column, condition, position)) }}
{% endmacro %}
{% macro default__last_non_null(column, condition, position) -%}
  {{ return('(array_agg(' ~ column ~ ' order by ' ~ position ~ ' desc) filter (where ' ~ column
      ~ ' is not null and ' ~ condition ~ '))[1]') }}
{%- endmacro %}
{% macro spark__last_non_null(column, condition, position) -%}
  {{ return('max_by(' ~ column ~ ', case when ' ~ column ~ ' is not null and ' ~ condition
      ~ ' then ' ~ position ~ ' end)') }}
{%- endmacro %}
{% macro bigquery__last_non_null(column, condition, position) -%}
  {#- Without LIMIT 1, which the emulator's translation cannot read (a key's changes in one
      batch are few). #}
  {{ return('array_agg(if(' ~ condition ~ ', ' ~ column ~ ', null) ignore nulls order by ' ~ position
      ~ ' desc)[safe_offset(0)]') }}
{%- endmacro %}

{#- Truncates (ctx.truncates): the batch's last truncate, when newer than the table's
    watermark: its sequence, File and process, and how many target rows it removes (for the
    markers). Zero rows when the batch has none, or only older ones. -#}
{% macro apply_truncate_sql(ctx) %}
  {%- if not ctx.truncates -%}{{ return('') }}{%- endif -%}
  {{ return(adapter.dispatch('apply_truncate_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_truncate_sql(ctx) %}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {%- set sql -%}
    select cdc_t.{{ q('cdc__truncate_seq') }}, cdc_t.{{ q('cdc__file_hash') }}, cdc_t.{{ q('cdc__process_id') }},
      count(cdc_dest.{{ lin.sequence }}) as {{ q('cdc__removed') }}
    from (
      select cdc_src.{{ lin.sequence }} as {{ q('cdc__truncate_seq') }}, cdc_src.{{ lin.file_hash }} as {{ q('cdc__file_hash') }},
        cdc_src.{{ lin.process_id }} as {{ q('cdc__process_id') }},
        row_number() over (order by cdc_src.{{ lin.sequence }} desc, cdc_src.{{ lin.file_hash }} desc,
          cdc_src.{{ lin.row_number }} desc) as {{ q('cdc__rank') }}
      from {{ ctx.source }} as cdc_src
      where cdc_src.{{ lin.file_hash }} in (select {{ q('file_hash') }} from {{ ctx.batch_files }})
        and cdc_src.{{ lin.operation }} = 'T'
    ) as cdc_t
    left join {{ ctx.tombstones }} as cdc_wm
      on cdc_wm.{{ q('target_table') }} = {{ ctx.this_table }} and cdc_wm.{{ q('key_text') }} = ''
    left join {{ ctx.target }} as cdc_dest
      on cdc_dest.{{ lin.sequence }} <= cdc_t.{{ q('cdc__truncate_seq') }}
    where cdc_t.{{ q('cdc__rank') }} = 1
      and (cdc_wm.{{ q('sequence_text') }} is null
           or cdc_t.{{ q('cdc__truncate_seq') }} > cast(cdc_wm.{{ q('sequence_text') }} as {{ ctx.sequence_type }}))
    group by cdc_t.{{ q('cdc__truncate_seq') }}, cdc_t.{{ q('cdc__file_hash') }}, cdc_t.{{ q('cdc__process_id') }}
  {%- endset -%}
  {{ return(cdc.create_scratch_sql(ctx.truncate, sql)) }}
{% endmacro %}

{#- The target rows the batch's truncate removes: every row not newer than it. -#}
{% macro apply_truncate_target_sql(ctx) %}
  {%- if not ctx.truncates -%}{{ return('') }}{%- endif -%}
  {{ return(adapter.dispatch('apply_truncate_target_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_truncate_target_sql(ctx) %}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {{ return('delete from ' ~ ctx.target ~ ' where ' ~ lin.sequence ~ ' <= (select max(' ~ q('cdc__truncate_seq')
      ~ ') from ' ~ ctx.truncate ~ ')') }}
{% endmacro %}

{#- The target. The sequence guards repeat the classification, for safety. -#}
{% macro apply_merge_target_sql(ctx) %}
  {{ return(adapter.dispatch('apply_merge_target_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_merge_target_sql(ctx) %}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {%- set S, D = 'DBT_INTERNAL_SOURCE', 'DBT_INTERNAL_DEST' -%}
  {%- set items = [] -%}
  {%- for c in ctx.model_columns -%}{%- do items.append({'column': c, 'value': S ~ '.' ~ c}) -%}{%- endfor -%}
  {%- do items.extend(ctx.applied_set) -%}
  {%- set sql -%}
    merge into {{ ctx.target }} as {{ D }}
    using (
      select * from {{ ctx.batch }} where {{ q('cdc__action') }} in ('insert', 'update', 'delete')
    ) as {{ S }}
    on {% for k in ctx.key_columns %}{{ D }}.{{ k }} = {{ S }}.{{ k }}{{ ' and ' if not loop.last }}{% endfor %}
    when matched and {{ S }}.{{ q('cdc__action') }} = 'delete'
         and {{ S }}.{{ lin.sequence }} > {{ D }}.{{ lin.sequence }} then delete
    when matched and {{ S }}.{{ q('cdc__action') }} = 'update'
         and {{ S }}.{{ lin.sequence }} > {{ D }}.{{ lin.sequence }} then update set
      {%- for item in items %}
      {{ item.column }} = {{ item.value }}{{ ',' if not loop.last }}
      {%- endfor %}
    when not matched and {{ S }}.{{ q('cdc__action') }} = 'insert' then insert (
      {%- for item in items %}{{ item.column }}{{ ', ' if not loop.last }}{% endfor -%}
    ) values (
      {%- for item in items %}{{ item.value }}{{ ', ' if not loop.last }}{% endfor -%}
    )
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}

{#- Tombstones: a newer delete is remembered, a newer insert or update forgets it. -#}
{% macro apply_merge_tombstones_sql(ctx) %}
  {{ return(adapter.dispatch('apply_merge_tombstones_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_merge_tombstones_sql(ctx) %}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {%- set S, D = 'DBT_INTERNAL_SOURCE', 'DBT_INTERNAL_DEST' -%}
  {%- set values = {
      'target_table': ctx.this_table,
      'key_text': S ~ '.' ~ q('cdc__key_text'),
      'sequence_text': 'cast(' ~ S ~ '.' ~ lin.sequence ~ ' as ' ~ dbt.type_string() ~ ')',
      'file_hash': S ~ '.' ~ lin.file_hash,
      'process_id': S ~ '.' ~ lin.process_id,
      'invocation_id': ctx.invocation,
      'deleted_at': ctx.now,
  } -%}
  {%- set spec = cdc.state_tables().tombstones -%}
  {%- set columns = cdc._state_values('tombstones', values) -%}
  {%- set sql -%}
    merge into {{ ctx.tombstones }} as {{ D }}
    using (
      {#- Only deletes and keys with a tombstone can change the tombstones: a batch of inserts
          and updates of keys never deleted reads the tombstones' keys and writes nothing. #}
      select {{ q('cdc__key_text') }}, {{ lin.sequence }}, {{ lin.operation }}, {{ lin.file_hash }}, {{ lin.process_id }}
      from {{ ctx.batch }}
      where {{ q('cdc__action') }} in ('insert', 'update', 'delete')
        and ({{ lin.operation }} = 'D' or {{ q('cdc__key_text') }} in (
          select cdc_known.{{ q('key_text') }} from {{ ctx.tombstones }} as cdc_known
          where cdc_known.{{ q('target_table') }} = {{ ctx.this_table }}
        ))
      {%- if ctx.truncates %}
      union all
      {#- The truncate: the table's watermark, under the empty key no real key can have. #}
      select '', {{ q('cdc__truncate_seq') }}, 'D', {{ q('cdc__file_hash') }}, {{ q('cdc__process_id') }}
      from {{ ctx.truncate }}
      {%- endif %}
    ) as {{ S }}
    on {{ D }}.{{ q('target_table') }} = {{ ctx.this_table }} and {{ D }}.{{ q('key_text') }} = {{ S }}.{{ q('cdc__key_text') }}
    when matched and {{ S }}.{{ lin.operation }} <> 'D' then delete
    when matched then update set
      {%- for c in columns if c.name not in spec.key %}
      {{ q(c.name) }} = {{ c.value }}{{ ',' if not loop.last }}
      {%- endfor %}
    when not matched and {{ S }}.{{ lin.operation }} = 'D' then insert (
      {%- for c in columns %}{{ q(c.name) }}{{ ', ' if not loop.last }}{% endfor -%}
    ) values (
      {%- for c in columns %}{{ c.value }}{{ ', ' if not loop.last }}{% endfor -%}
    )
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}

{#- One Applied File Marker per File of the batch, after the target changed; never a second
    marker, should another apply of this table have written one meanwhile. -#}
{% macro apply_insert_markers_sql(ctx) %}
  {{ return(adapter.dispatch('apply_insert_markers_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_insert_markers_sql(ctx) %}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {%- set action = q('cdc__action') -%}
  {%- set counts -%}
    left join (
      select
        {{ lin.file_hash }} as cdc_file_hash,
        sum(case when {{ action }} = 'insert' then 1 else 0 end) as n_insert,
        sum(case when {{ action }} = 'update' then 1 else 0 end) as n_update,
        sum(case when {{ action }} = 'delete' then 1 else 0 end) as n_delete,
        sum(case when {{ action }} in ('insert', 'update', 'delete') then 1 else 0 end) as n_applied
      from {{ ctx.batch }}
      group by {{ lin.file_hash }}
    ) as cdc_counts on cdc_counts.cdc_file_hash = cdc_files.{{ q('file_hash') }}
    {%- if ctx.truncates %}
    left join {{ ctx.truncate }} as cdc_cut on cdc_cut.{{ q('cdc__file_hash') }} = cdc_files.{{ q('file_hash') }}
    {%- endif %}
  {%- endset -%}
  {%- set removed = (' + coalesce(cdc_cut.' ~ q('cdc__removed') ~ ', 0)') if ctx.truncates else '' -%}
  {%- set cut = (' - (case when cdc_cut.' ~ q('cdc__file_hash') ~ ' is null then 0 else 1 end)') if ctx.truncates else '' -%}
  {{ return(cdc._insert_markers(ctx, counts, {
      'rows_inserted': 'coalesce(cdc_counts.n_insert, 0)',
      'rows_updated': 'coalesce(cdc_counts.n_update, 0)',
      'rows_deleted': 'coalesce(cdc_counts.n_delete, 0)' ~ removed,
      'rows_skipped': 'cdc_files.' ~ q('cdc__rows') ~ ' - coalesce(cdc_counts.n_applied, 0)' ~ cut,
  })) }}
{% endmacro %}

{#- The markers INSERT every apply shares: one row per File of ctx.batch_files (alias cdc_files)
    without a marker for this table, its counts from `joins` (left joins onto cdc_files) and
    `counts` (rows_inserted, rows_updated, rows_deleted, rows_skipped: SQL expressions). -#}
{% macro _insert_markers(ctx, joins, counts) %}
  {%- set q = adapter.quote -%}
  {%- set values = {
      'target_table': ctx.this_table,
      'file_hash': 'cdc_files.' ~ q('file_hash'),
      'file_name': 'cdc_files.' ~ q('file_name'),
      'process_id': 'cdc_files.' ~ q('process_id'),
      'invocation_id': ctx.invocation,
      'applied_at': ctx.now,
  } -%}
  {%- if ctx.ledger is not none -%}
    {#- A group member: the held step after this one needs the same counts; a File applied in
        parts adds the counts of its earlier parts (cdc_held_files). -#}
    {%- do ctx.update({'marker_joins': joins, 'marker_counts': counts}) -%}
    {%- set joins = joins ~ '\n    left join ' ~ ctx.held_files ~ ' as cdc_prior on cdc_prior.' ~ q('target_table')
        ~ ' = ' ~ ctx.this_table ~ ' and cdc_prior.' ~ q('file_hash') ~ ' = cdc_files.' ~ q('file_hash') -%}
    {%- set summed = {} -%}
    {%- for name, expr in counts.items() -%}
      {%- do summed.update({name: '(' ~ expr ~ ') + coalesce(cdc_prior.' ~ q(name) ~ ', 0)'}) -%}
    {%- endfor -%}
    {%- set counts = summed -%}
  {%- endif -%}
  {%- do values.update(counts) -%}
  {%- set columns = cdc._state_values('applied_files', values) -%}
  {%- set select_sql -%}
    select
      {%- for c in columns %}
      {{ c.value }} as {{ q(c.name) }}{{ ',' if not loop.last }}
      {%- endfor %}
    from {{ ctx.batch_files }} as cdc_files
    {{ joins }}
    where {% if ctx.ledger is not none %}cdc_files.{{ q('cdc__held') }} = 0 and {% endif %}cdc_files.{{ q('file_hash') }} not in (
      select cdc_markers.{{ q('file_hash') }} from {{ ctx.markers }} as cdc_markers
      where cdc_markers.{{ q('target_table') }} = {{ ctx.this_table }}
    )
  {%- endset -%}
  {{ return(cdc.write_markers_sql(ctx, columns | map(attribute='name') | list, select_sql)) }}
{% endmacro %}

{#- The statement that adds the markers `select_sql` yields (one row per File, `names` its
    columns). An INSERT where the apply is one transaction; on Spark destinations a MERGE on
    (this table, content hash) with a never-true matched clause, so that Iceberg plans it as a
    copy-on-write rewrite and validates it (serializable): of two applies of one table racing
    to add the same markers, the later commit fails instead of adding a second marker. The
    literal table name in ON keeps other tables' markers out of that check. -#}
{% macro write_markers_sql(ctx, names, select_sql) %}
  {{ return(adapter.dispatch('write_markers_sql', 'cdc')(ctx, names, select_sql)) }}
{% endmacro %}
{% macro default__write_markers_sql(ctx, names, select_sql) %}
  {%- set q = adapter.quote -%}
  {%- set sql -%}
    insert into {{ ctx.markers }} ({% for n in names %}{{ q(n) }}{{ ', ' if not loop.last }}{% endfor %})
    {{ select_sql }}
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
{% macro spark__write_markers_sql(ctx, names, select_sql) %}
  {%- set q = adapter.quote -%}
  {%- set sql -%}
    merge into {{ ctx.markers }} as cdc_marker
    using ({{ select_sql }}) as cdc_new
    on cdc_marker.{{ q('target_table') }} = {{ ctx.this_table }}
      and cdc_marker.{{ q('file_hash') }} = cdc_new.{{ q('file_hash') }}
    when matched and 1 = 0 then update set cdc_marker.{{ q('file_hash') }} = cdc_new.{{ q('file_hash') }}
    when not matched then insert ({% for n in names %}{{ q(n) }}{{ ', ' if not loop.last }}{% endfor %})
      values ({% for n in names %}cdc_new.{{ q(n) }}{{ ', ' if not loop.last }}{% endfor %})
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}

{#- A state table's columns in the contract's order, each with its value from `values`; a
    column the contract adds without a value here is a compiler error, not a silent NULL. -#}
{% macro _state_values(name, values) %}
  {%- set out = [] -%}
  {%- for column in cdc.state_tables()[name].columns -%}
    {%- if column not in values -%}
      {{ exceptions.raise_compiler_error("cdc contract: the apply has no value for "
          ~ name ~ "." ~ column) }}
    {%- endif -%}
    {%- do out.append({'name': column, 'value': values[column]}) -%}
  {%- endfor -%}
  {{ return(out) }}
{% endmacro %}

{#- Statements that forget this target's markers and tombstones: before (re)creating it. -#}
{% macro reset_statements(target_name) %}
  {%- set where = ' where ' ~ adapter.quote('target_table') ~ ' = ' ~ cdc.sql_string(target_name) -%}
  {{ return([
      'delete from ' ~ cdc.state_relation('applied_files') ~ where,
      'delete from ' ~ cdc.state_relation('tombstones') ~ where,
      'delete from ' ~ cdc.state_relation('history_deletes') ~ where,
      'delete from ' ~ cdc.state_relation('held_files') ~ where,
  ]) }}
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

{#- Scratch tables for one apply: real tables on Spark destinations, temporary elsewhere. -#}
{% macro scratch_relation(target, suffix) %}
  {{ return(adapter.dispatch('scratch_relation', 'cdc')(target, suffix)) }}
{% endmacro %}
{% macro default__scratch_relation(target, suffix) %}
  {{ return(api.Relation.create(identifier=target.identifier ~ '__cdc_' ~ suffix, type='table')) }}
{% endmacro %}
{% macro spark__scratch_relation(target, suffix) %}
  {{ return(target.incorporate(path={'identifier': target.identifier ~ '__cdc_' ~ suffix})) }}
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
