{#-
  The history apply of a change entity (meta.cdc.history: true on an apply model whose entity
  has mode: cdc): every staged change becomes a version row, in sequence order across Files and
  runs, instead of only the last change per key reaching a current-state table.

    lock              as for the current-state apply (PostgreSQL: an advisory lock);
    batch_files       the same step: the Files without a marker for this target;
    history_classify  the changes of those Files, and everything already known of their keys
                      (the target's versions, and the deletes that left no row:
                      cdc_history_deletes), ordered per key by (sequence, File hash, row); each
                      event's validity ends where the key's next event starts: valid_to is
                      its time (meta.cdc.valid_from, else the sequence) and closed_process_id
                      the process that staged it. A change already in the target (a replay
                      after a crash) is kept once;
    history_merge     one MERGE on (File hash, row number): insert every new version (and, with
                      hard_deletes: new_record, a deletion record per delete: operation D, open
                      until the key comes back); re-close existing versions whose end moved (a
                      late File's change lands between them). Data and lineage of existing
                      rows are never touched, only valid_to and closed_process_id;
    history_deletes   hard_deletes: invalidate: remember each new delete (key, sequence, time),
                      so that a later late File's change is placed before or after it;
    history_markers   one Applied File Marker per File: rows_inserted, rows_updated,
                      rows_deleted its I, U and D changes that became events; rows_skipped the
                      rows already applied (a replay).

  Partial updates (null_means: unchanged): a new version's unchanged column takes the last value
  set since the key's last insert, delete or truncate. Truncates (an operation mapped to T): an
  event of every key, closing its open version; remembered in cdc_history_deletes under the
  empty key.

  Replaying after a crash anywhere gives the same table: an event is identified by its File
  hash and row number, and the validity of each key's events is recomputed from all of them.
-#}

{% macro apply_history_statements(ctx) %}
  {{ return(cdc.apply_steps([
      cdc.apply_lock_sql(ctx),
      cdc.apply_batch_files_sql(ctx),
      cdc.apply_history_classify_sql(ctx),
      cdc.apply_history_merge_sql(ctx),
      cdc.apply_history_deletes_sql(ctx) if ctx.hard_deletes == 'invalidate' or ctx.truncates else '',
      cdc.apply_history_markers_sql(ctx),
      cdc.apply_held_files_sql(ctx),
  ])) }}
{% endmacro %}

{% macro apply_history_classify_sql(ctx) %}
  {{ return(adapter.dispatch('apply_history_classify_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_history_classify_sql(ctx) %}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {#- The event columns of this step's CTEs, quoted once. -#}
  {%- set key_text, event_file, event_row = q('cdc__key_text'), q('cdc__file_hash'), q('cdc__row_number') -%}
  {%- set event_sequence, event_operation = q('cdc__sequence'), q('cdc__operation') -%}
  {%- set order = 'partition by ' ~ key_text ~ ' order by ' ~ event_sequence ~ ', ' ~ event_file ~ ', ' ~ event_row -%}
  {%- set null_time = 'cast(null as ' ~ ctx.time_type ~ ')' -%}
  {%- set null_string = 'cast(null as ' ~ dbt.type_string() ~ ')' -%}
  {%- set in_batch = cdc.in_batch_files(ctx, lin.file_hash) -%}
  {%- set sql -%}
    with cdc_new as (
      select cdc_src.*, {{ cdc._key_text('cdc_src', ctx.key_columns) }} as {{ key_text }}
      from {{ ctx.source }} as cdc_src
      where cdc_src.{{ in_batch }}{% if ctx.truncates %} and cdc_src.{{ lin.operation }} <> 'T'{% endif %}
    ),
    {%- if ctx.truncates %}
    cdc_truncates as (
      {#- Truncates are events of every key: the table's earlier ones, and the batch's. #}
      select cast(cdc_del.{{ q('sequence_text') }} as {{ ctx.sequence_type }}) as {{ event_sequence }},
        cdc_del.{{ q('file_hash') }} as {{ event_file }}, cdc_del.{{ q('file_row_number') }} as {{ event_row }},
        cast(cdc_del.{{ q('valid_from_text') }} as {{ ctx.time_type }}) as {{ q('cdc__time') }},
        cdc_del.{{ q('process_id') }} as {{ q('cdc__process_id') }}, 0 as {{ q('cdc__is_new') }}
      from {{ ctx.history_deletes }} as cdc_del
      where cdc_del.{{ q('target_table') }} = {{ ctx.this_table }} and cdc_del.{{ q('key_text') }} = ''
      union all
      select cdc_src.{{ lin.sequence }}, cdc_src.{{ lin.file_hash }}, cdc_src.{{ lin.row_number }},
        cdc_src.{{ ctx.valid_from }}, cdc_src.{{ lin.process_id }}, 1
      from {{ ctx.source }} as cdc_src
      where cdc_src.{{ in_batch }} and cdc_src.{{ lin.operation }} = 'T'
    ),
    {%- endif %}
    cdc_keys as (
      {%- if ctx.truncates %}
      select distinct cdc_some.{{ key_text }} from (
        select {{ key_text }} from cdc_new
        union all
        {#- A truncate in the batch closes every key's open version: all keys take part. #}
        select {{ cdc._key_text('cdc_all', ctx.key_columns) }} from {{ ctx.target }} as cdc_all
        inner join (
          select count(*) as cdc_n from cdc_truncates where {{ q('cdc__is_new') }} = 1
        ) as cdc_any on cdc_any.cdc_n > 0
      ) as cdc_some
      {%- else %}
      select distinct {{ key_text }} from cdc_new
      {%- endif %}
    ),
    cdc_events as (
      select {{ cdc._key_text('cdc_dest', ctx.key_columns) }} as {{ key_text }},
        cdc_dest.{{ lin.sequence }} as {{ event_sequence }}, cdc_dest.{{ lin.file_hash }} as {{ event_file }},
        cdc_dest.{{ lin.row_number }} as {{ event_row }}, cdc_dest.{{ lin.operation }} as {{ event_operation }},
        cdc_dest.{{ lin.valid_from }} as {{ q('cdc__time') }}, cdc_dest.{{ lin.process_id }} as {{ q('cdc__process_id') }},
        0 as {{ q('cdc__is_new') }}, 1 as {{ q('cdc__in_target') }},
        cdc_dest.{{ lin.valid_to }} as {{ q('cdc__old_to') }}, cdc_dest.{{ lin.closed_process_id }} as {{ q('cdc__old_closed') }}
        {%- for p in ctx.partial %}, cdc_dest.{{ p.column }} as {{ p.value }}{% endfor %}
      from {{ ctx.target }} as cdc_dest
      where {{ cdc._key_text('cdc_dest', ctx.key_columns) }} in (select {{ key_text }} from cdc_keys)
      union all
      select cdc_del.{{ q('key_text') }}, cast(cdc_del.{{ q('sequence_text') }} as {{ ctx.sequence_type }}),
        cdc_del.{{ q('file_hash') }}, cdc_del.{{ q('file_row_number') }}, 'D',
        cast(cdc_del.{{ q('valid_from_text') }} as {{ ctx.time_type }}), cdc_del.{{ q('process_id') }},
        0, 0, {{ null_time }}, {{ null_string }}
        {%- for p in ctx.partial %}, null{% endfor %}
      from {{ ctx.history_deletes }} as cdc_del
      where cdc_del.{{ q('target_table') }} = {{ ctx.this_table }}
        and cdc_del.{{ q('key_text') }} in (select {{ key_text }} from cdc_keys)
      {%- if ctx.truncates %}
      union all
      select cdc_keys.{{ key_text }}, cdc_truncates.{{ event_sequence }}, cdc_truncates.{{ event_file }}, cdc_truncates.{{ event_row }}, 'T',
        cdc_truncates.{{ q('cdc__time') }}, cdc_truncates.{{ q('cdc__process_id') }},
        cdc_truncates.{{ q('cdc__is_new') }}, 0, {{ null_time }}, {{ null_string }}
        {%- for p in ctx.partial %}, null{% endfor %}
      from cdc_keys cross join cdc_truncates
      {%- endif %}
      union all
      select cdc_new.{{ key_text }}, cdc_new.{{ lin.sequence }}, cdc_new.{{ lin.file_hash }}, cdc_new.{{ lin.row_number }},
        cdc_new.{{ lin.operation }}, cdc_new.{{ ctx.valid_from }}, cdc_new.{{ lin.process_id }},
        1, 0, {{ null_time }}, {{ null_string }}
        {%- for p in ctx.partial %}, cdc_new.{{ p.column }}{% endfor %}
      from cdc_new
    ),
    cdc_once as (
      {#- A change already applied (a replay after a crash) is kept once: the applied copy. #}
      select cdc_events.*,
        row_number() over (
          partition by cdc_events.{{ key_text }}, cdc_events.{{ event_file }}, cdc_events.{{ event_row }}
          order by cdc_events.{{ q('cdc__is_new') }}
        ) as {{ q('cdc__copy') }}
      from cdc_events
    ){% if ctx.partial %},
    cdc_segments as (
      {#- Partial updates: a segment of a key's events starts at each insert, delete or
          truncate; within it, an unchanged (NULL) column takes the last value set before. #}
      select cdc_once.*,
        sum(case when cdc_once.{{ event_operation }} in ('I', 'D', 'T') then 1 else 0 end) over (
          {{ order }} rows between unbounded preceding and current row) as {{ q('cdc__segment') }}
      from cdc_once
      where cdc_once.{{ q('cdc__copy') }} = 1
    ),
    cdc_groups as (
      select cdc_segments.*
        {%- for p in ctx.partial %},
        count(cdc_segments.{{ p.value }}) over (
          partition by {{ key_text }}, {{ q('cdc__segment') }} order by {{ event_sequence }}, {{ event_file }}, {{ event_row }}
          rows between unbounded preceding and current row) as {{ q('cdc__set' ~ loop.index) }}
        {%- endfor %}
      from cdc_segments
    ){% endif %}
    select cdc_once.*,
      {%- for p in ctx.partial %}
      first_value(cdc_once.{{ p.value }}) over (
        partition by {{ key_text }}, {{ q('cdc__segment') }}, {{ q('cdc__set' ~ loop.index) }}
        order by {{ event_sequence }}, {{ event_file }}, {{ event_row }} rows between unbounded preceding and current row
      ) as {{ p.fill }},
      {%- endfor %}
      {{ cdc._valid_to_or_current(ctx, 'lead(cdc_once.' ~ q('cdc__time') ~ ') over (' ~ order ~ ')') }} as {{ q('cdc__valid_to') }},
      lead(cdc_once.{{ q('cdc__process_id') }}) over ({{ order }}) as {{ q('cdc__closed_by') }}
    from {{ 'cdc_groups' if ctx.partial else 'cdc_once' }} as cdc_once
    where cdc_once.{{ q('cdc__copy') }} = 1
  {%- endset -%}
  {{ return(cdc.create_scratch_sql(ctx.batch, sql)) }}
{% endmacro %}

{% macro apply_history_merge_sql(ctx) %}
  {{ return(adapter.dispatch('apply_history_merge_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_history_merge_sql(ctx) %}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {%- set S, D = 'DBT_INTERNAL_SOURCE', 'DBT_INTERNAL_DEST' -%}
  {%- set items = [] -%}
  {%- for c in ctx.model_columns -%}
    {%- set p = ctx.partial | selectattr('column', 'equalto', c) | first -%}
    {%- do items.append({'column': c, 'value': S ~ '.' ~ (p.fill if p else c)}) -%}
  {%- endfor -%}
  {%- do items.extend(ctx.applied_set) -%}
  {%- do items.append({'column': lin.valid_from, 'value': S ~ '.' ~ ctx.valid_from}) -%}
  {%- do items.append({'column': lin.valid_to, 'value': S ~ '.' ~ q('cdc__valid_to')}) -%}
  {%- do items.append({'column': lin.closed_process_id, 'value': S ~ '.' ~ q('cdc__closed_by')}) -%}
  {%- set to, closed = q('cdc__valid_to'), q('cdc__closed_by') -%}
  {%- set sql -%}
    merge into {{ ctx.target }} as {{ D }}
    using (
      select cdc_src.*,
        cdc_batch.{{ q('cdc__file_hash') }} as {{ q('cdc__merge_file') }},
        cdc_batch.{{ q('cdc__row_number') }} as {{ q('cdc__merge_row') }},
        cdc_batch.{{ to }}, cdc_batch.{{ closed }}
        {%- for p in ctx.partial %}, cdc_batch.{{ p.fill }}{% endfor %}
      from {{ ctx.batch }} as cdc_batch
      left join {{ ctx.source }} as cdc_src
        on cdc_batch.{{ q('cdc__is_new') }} = 1
        and cdc_src.{{ lin.file_hash }} = cdc_batch.{{ q('cdc__file_hash') }}
        and cdc_src.{{ lin.row_number }} = cdc_batch.{{ q('cdc__row_number') }}
      where (cdc_batch.{{ q('cdc__is_new') }} = 1
             and cdc_batch.{{ q('cdc__operation') }} not in ({{ "'D', " if ctx.hard_deletes != 'new_record' }}'T'))
         or (cdc_batch.{{ q('cdc__in_target') }} = 1 and not (
               {{ cdc._same('cdc_batch.' ~ to, 'cdc_batch.' ~ q('cdc__old_to')) }}
               and {{ cdc._same('cdc_batch.' ~ closed, 'cdc_batch.' ~ q('cdc__old_closed')) }}))
    ) as {{ S }}
    on {{ D }}.{{ lin.file_hash }} = {{ S }}.{{ q('cdc__merge_file') }}
      and {{ D }}.{{ lin.row_number }} = {{ S }}.{{ q('cdc__merge_row') }}
    when matched then update set
      {{ lin.valid_to }} = {{ S }}.{{ to }},
      {{ lin.closed_process_id }} = {{ S }}.{{ closed }}
    when not matched then {{ cdc._insert_values(items) }}
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}

{#- Two values equal, NULLs included; never NULL itself (not every destination has IS NOT
    DISTINCT FROM). -#}
{% macro _same(a, b) -%}
  (({{ a }} is null and {{ b }} is null) or ({{ a }} is not null and {{ b }} is not null and {{ a }} = {{ b }}))
{%- endmacro %}

{% macro apply_history_deletes_sql(ctx) %}
  {{ return(adapter.dispatch('apply_history_deletes_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_history_deletes_sql(ctx) %}
  {%- set q = adapter.quote -%}
  {%- set s = dbt.type_string() -%}
  {%- set values = {
      'target_table': ctx.this_table,
      'file_hash': 'cdc_batch.' ~ q('cdc__file_hash'),
      'file_row_number': 'cdc_batch.' ~ q('cdc__row_number'),
      'key_text': 'cdc_batch.' ~ q('cdc__key_text'),
      'sequence_text': 'cast(cdc_batch.' ~ q('cdc__sequence') ~ ' as ' ~ s ~ ')',
      'valid_from_text': 'cast(cdc_batch.' ~ q('cdc__time') ~ ' as ' ~ s ~ ')',
      'process_id': 'cdc_batch.' ~ q('cdc__process_id'),
      'invocation_id': ctx.invocation,
      'applied_at': ctx.now,
  } -%}
  {%- set lin = ctx.lin -%}
  {%- set truncate_values = {
      'target_table': ctx.this_table,
      'file_hash': 'cdc_src.' ~ lin.file_hash,
      'file_row_number': 'cdc_src.' ~ lin.row_number,
      'key_text': "''",
      'sequence_text': 'cast(cdc_src.' ~ lin.sequence ~ ' as ' ~ s ~ ')',
      'valid_from_text': 'cast(cdc_src.' ~ ctx.valid_from ~ ' as ' ~ s ~ ')',
      'process_id': 'cdc_src.' ~ lin.process_id,
      'invocation_id': ctx.invocation,
      'applied_at': ctx.now,
  } -%}
  {%- set columns = cdc._state_values('history_deletes', values) -%}
  {%- set sql -%}
    insert into {{ ctx.history_deletes }} ({% for c in columns %}{{ q(c.name) }}{{ ', ' if not loop.last }}{% endfor %})
    select
      {%- for c in columns %}
      {{ c.value }}{{ ',' if not loop.last }}
      {%- endfor %}
    from {{ ctx.batch }} as cdc_batch
    where cdc_batch.{{ q('cdc__is_new') }} = 1 and cdc_batch.{{ q('cdc__operation') }} = 'D'
      {%- if ctx.hard_deletes != 'invalidate' %} and 1 = 0{% endif %}
    {%- if ctx.truncates %}
    union all
    {#- A truncate, once, under the empty key: an event of every key, later Files' too. #}
    select
      {%- for c in cdc._state_values('history_deletes', truncate_values) %}
      {{ c.value }}{{ ',' if not loop.last }}
      {%- endfor %}
    from {{ ctx.source }} as cdc_src
    left join {{ ctx.history_deletes }} as cdc_known
      on cdc_known.{{ q('target_table') }} = {{ ctx.this_table }}
      and cdc_known.{{ q('file_hash') }} = cdc_src.{{ lin.file_hash }}
      and cdc_known.{{ q('file_row_number') }} = cdc_src.{{ lin.row_number }}
    where {{ cdc.in_batch_files(ctx, 'cdc_src.' ~ lin.file_hash) }}
      and cdc_src.{{ lin.operation }} = 'T' and cdc_known.{{ q('file_hash') }} is null
    {%- endif %}
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}

{% macro apply_history_markers_sql(ctx) %}
  {{ return(adapter.dispatch('apply_history_markers_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_history_markers_sql(ctx) %}
  {%- set q = adapter.quote -%}
  {%- set event_operation = q('cdc__operation') -%}
  {%- set joins -%}
    left join (
      select
        {{ q('cdc__file_hash') }} as cdc_file_hash,
        sum(case when {{ event_operation }} = 'I' then 1 else 0 end) as n_insert,
        sum(case when {{ event_operation }} = 'U' then 1 else 0 end) as n_update,
        sum(case when {{ event_operation }} = 'D' then 1 else 0 end) as n_delete,
        count(*) as n_new
      from {{ ctx.batch }}
      where {{ q('cdc__is_new') }} = 1 and {{ event_operation }} <> 'T'
      group by {{ q('cdc__file_hash') }}
    ) as cdc_counts on cdc_counts.cdc_file_hash = cdc_files.{{ q('file_hash') }}
    {%- if ctx.truncates %}
    left join (
      {#- Truncates count once each (the batch holds one event per key for them), and only
          those this build recorded (history_deletes, just before): a replayed File's
          truncate, recorded by the build that stopped, is stale like its other changes. #}
      select cdc_del.{{ q('file_hash') }} as cdc_file_hash, count(*) as n_truncate
      from {{ ctx.history_deletes }} as cdc_del
      where cdc_del.{{ q('target_table') }} = {{ ctx.this_table }} and cdc_del.{{ q('key_text') }} = ''
        and cdc_del.{{ q('invocation_id') }} = {{ ctx.invocation }}
        and {{ cdc.in_batch_files(ctx, 'cdc_del.' ~ q('file_hash')) }}
      group by cdc_del.{{ q('file_hash') }}
    ) as cdc_cuts on cdc_cuts.cdc_file_hash = cdc_files.{{ q('file_hash') }}
    {%- endif %}
  {%- endset -%}
  {%- set cuts = 'coalesce(cdc_cuts.n_truncate, 0)' if ctx.truncates else '0' -%}
  {{ return(cdc._insert_markers(ctx, joins, {
      'rows_inserted': 'coalesce(cdc_counts.n_insert, 0)',
      'rows_updated': 'coalesce(cdc_counts.n_update, 0)',
      'rows_deleted': 'coalesce(cdc_counts.n_delete, 0) + ' ~ cuts,
      'rows_skipped': 'cdc_files.' ~ q('cdc__rows') ~ ' - coalesce(cdc_counts.n_new, 0) - ' ~ cuts,
  })) }}
{% endmacro %}
