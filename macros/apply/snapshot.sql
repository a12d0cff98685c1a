{#-
  The apply of a snapshot entity (meta.cdc.mode: snapshot): each File is an extract of the
  table on its effective date (`snapshot_kind: full`, every row; or `delta`, the rows that
  changed). Staged rows carry a key hash and a row hash (the contract's key_hash and row_hash
  lineage columns) and the File's effective date as their sequence. Set-based, whatever the number of Files:

    lock              as for change Files (PostgreSQL: an advisory lock);
    snapshot_files    the Files without a marker for this target, with their effective dates:
                      a File older than the newest one already applied is stale (it changes
                      nothing), and so, for a history, is every File up to the last one the
                      history already holds (applied by a build that stopped before its
                      markers); the others are numbered 1..n in effective-date order;
    snapshot_classify every key's hashes in the target (position 0) and in Files 1..n, in
                      order, each compared with the key's previous position: insert (new key,
                      or back after a delete), update (row hash changed), unchanged; for a full
                      extract, a key missing from the next File is deleted by that File;
    snapshot_merge    one MERGE on the key hash: a key present after File n takes the row of
                      the last File that inserted or updated it (its lineage with it, operation
                      I or U); a key of the target missing from File n of a full extract is
                      deleted; unchanged keys are not touched, lineage included;
    snapshot_history  instead of snapshot_merge, for a history model (meta.cdc.history): the
                      target holds versions, and "the target" above is its open versions
                      (valid_to NULL). One MERGE: a version opens at every insert or update
                      (valid_from: the File's effective date) and closes at the key's next
                      insert, update or delete (valid_to: that File's effective date, and the
                      process id that staged it); an open version the batch changes or deletes
                      is closed; unchanged keys are not touched;
    snapshot_markers  one Applied File Marker per File: rows inserted, updated, deleted by it;
                      rows_skipped its unchanged rows (all of them when it is stale).

  On Spark destinations the MERGE checks first that no other build applied the batch meanwhile
  (snapshot_guard_join). The target is read for its key and row hashes only, so the cost does
  not grow with its width.
  Each step is dispatched like the change-File steps (statements.sql); one argument, the apply
  context, with `kind` (full or delta) added.
-#}

{% macro apply_snapshot_statements(ctx) %}
  {{ return(cdc.apply_steps([
      cdc.apply_lock_sql(ctx),
      cdc.apply_dedupe_target_sql(ctx),
      cdc.apply_snapshot_files_sql(ctx),
      cdc.apply_snapshot_classify_sql(ctx),
      cdc.apply_snapshot_history_sql(ctx) if ctx.history else cdc.apply_snapshot_merge_sql(ctx),
      cdc.apply_snapshot_markers_sql(ctx),
      cdc.apply_key_index_sql(ctx),
  ])) }}
{% endmacro %}

{% macro apply_snapshot_files_sql(ctx) %}
  {{ return(adapter.dispatch('apply_snapshot_files_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_snapshot_files_sql(ctx, as_select=false) %}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {%- set stale -%}
    case when cdc_done.cdc_watermark is not null
         and cdc_new.{{ q('effective_date') }} < cdc_done.cdc_watermark then 1 else 0 end
  {%- endset -%}
  {%- set applied_stale -%}
    case when cdc_ranked.cdc_was_stale = 1 or cdc_ranked.cdc_rank <= cdc_upto.cdc_upto then 1 else 0 end
  {%- endset -%}
  {%- set sql -%}
    with cdc_done as (
      select max(cdc_applied.{{ q('effective_date') }}) as cdc_watermark
      from {{ ctx.markers }} as cdc_markers
      join {{ ctx.files }} as cdc_applied
        on cdc_applied.{{ q('file_hash') }} = cdc_markers.{{ q('file_hash') }}
        and cdc_applied.{{ q('entity') }} = {{ ctx.entity }}
      where cdc_markers.{{ q('target_table') }} = {{ ctx.this_table }}
    ),
    cdc_new as (
      select cdc_files.{{ q('file_hash') }}, cdc_files.{{ q('file_name') }}, cdc_files.{{ q('process_id') }},
        cdc_files.{{ q('effective_date') }}, coalesce(cdc_rows.n, 0) as {{ q('cdc__rows') }}
      from {{ ctx.files }} as cdc_files
      left join (
        select cdc_src.{{ ctx.lin.file_hash }} as cdc_file_hash, count(*) as n
        from {{ ctx.source }} as cdc_src
        group by cdc_src.{{ ctx.lin.file_hash }}
      ) as cdc_rows on cdc_rows.cdc_file_hash = cdc_files.{{ q('file_hash') }}
      where cdc_files.{{ q('entity') }} = {{ ctx.entity }}
        and cdc_files.{{ q('effective_date') }} is not null
        and cdc_files.{{ q('file_hash') }} not in (
          select cdc_markers.{{ q('file_hash') }} from {{ ctx.markers }} as cdc_markers
          where cdc_markers.{{ q('target_table') }} = {{ ctx.this_table }}
        )
        and (cdc_files.{{ q('staged_rows') }} = 0 or cdc_rows.n > 0)
    )
    {%- if ctx.history %},
    cdc_seen as (
      {#- A history's Files already in it though they have no marker (a build that stopped, or
          was overtaken, between its MERGE and its markers): a version they opened, or one
          they closed (its valid_to their date, its closing process theirs). -#}
      select distinct cdc_both.cdc_file_hash from (
        select cdc_dest.{{ lin.file_hash }} as cdc_file_hash
        from {{ ctx.target }} as cdc_dest
        where cdc_dest.{{ lin.file_hash }} in (select {{ q('file_hash') }} from cdc_new)
        union all
        select cdc_new.{{ q('file_hash') }}
        from {{ ctx.target }} as cdc_dest
        join cdc_new
          on cast(cdc_dest.{{ lin.valid_to }} as date) = cdc_new.{{ q('effective_date') }}
          and cdc_dest.{{ lin.closed_process_id }} = cdc_new.{{ q('process_id') }}
        where not {{ cdc._is_open('cdc_dest', lin.valid_to, ctx.valid_to_current) }}
      ) as cdc_both
    ),
    {%- else %},
    cdc_seen as (
      select cast(null as {{ dbt.type_string() }}) as cdc_file_hash from cdc_done where 1 = 0
    ),
    {%- endif %}
    cdc_ranked as (
      select cdc_new.*, {{ stale }} as cdc_was_stale,
        case when cdc_seen.cdc_file_hash is null then 0 else 1 end as cdc_is_seen,
        row_number() over (
          order by {{ stale }}, cdc_new.{{ q('effective_date') }}, cdc_new.{{ q('file_name') }}, cdc_new.{{ q('file_hash') }}
        ) as cdc_rank
      from cdc_new cross join cdc_done
      left join cdc_seen on cdc_seen.cdc_file_hash = cdc_new.{{ q('file_hash') }}
    ),
    cdc_upto as (
      {#- Every File up to the last one seen in the target was applied with it: stale now. -#}
      select coalesce(max(case when cdc_is_seen = 1 then cdc_rank end), 0) as cdc_upto from cdc_ranked
    )
    select
      {%- for c in ['file_hash', 'file_name', 'process_id', 'effective_date', 'cdc__rows'] %}
      cdc_ranked.{{ q(c) }},
      {%- endfor %}
      {{ applied_stale }} as {{ q('cdc__stale') }},
      row_number() over (
        order by {{ applied_stale }}, cdc_ranked.{{ q('effective_date') }}, cdc_ranked.{{ q('file_name') }}, cdc_ranked.{{ q('file_hash') }}
      ) as {{ q('cdc__pos') }}
    from cdc_ranked cross join cdc_upto
  {%- endset -%}
  {{ return(sql if as_select else cdc.create_scratch_sql(ctx.batch_files, sql)) }}
{% endmacro %}
{#- Spark: read now, as the statements are rendered, and kept as literals in a temporary view
    (apply/steps/batch_files.sql). Only the target's dedupe can run before this step, and it
    runs for a current state, whose Files this select finds without reading the target. -#}
{% macro spark__apply_snapshot_files_sql(ctx) %}
  {%- if ctx.batch_files.schema is not none or not execute -%}
    {{ return(cdc.default__apply_snapshot_files_sql(ctx)) }}
  {%- endif -%}
  {%- set found = run_query(cdc.default__apply_snapshot_files_sql(ctx, as_select=true)) -%}
  {{ return(cdc.spark_rows_view_sql(ctx.batch_files, found,
      ['string', 'string', 'string', 'date', 'bigint', 'int', 'int'])) }}
{% endmacro %}

{% macro apply_snapshot_classify_sql(ctx) %}
  {{ return(adapter.dispatch('apply_snapshot_classify_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_snapshot_classify_sql(ctx) %}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {%- set full = ctx.kind == 'full' -%}
  {%- set w = 'partition by cdc_events.' ~ q('cdc__key_hash') ~ ' order by cdc_events.' ~ q('cdc__pos') -%}
  {%- set sql -%}
    with cdc_live as (
      select {{ q('file_hash') }}, {{ q('cdc__pos') }} from {{ ctx.batch_files }} where {{ q('cdc__stale') }} = 0
    ),
    cdc_n as (
      select count(*) as cdc_n from cdc_live
    ),
    cdc_events as (
      select 0 as {{ q('cdc__pos') }}, cdc_dest.{{ lin.key_hash }} as {{ q('cdc__key_hash') }},
        cdc_dest.{{ lin.row_hash }} as {{ q('cdc__row_hash') }}
      from {{ ctx.current }} as cdc_dest
      union all
      select cdc_live.{{ q('cdc__pos') }}, cdc_src.{{ lin.key_hash }}, cdc_src.{{ lin.row_hash }}
      from {{ ctx.source }} as cdc_src
      join cdc_live on cdc_live.{{ q('file_hash') }} = cdc_src.{{ lin.file_hash }}
    ),
    cdc_ordered as (
      select cdc_events.*,
        lag(cdc_events.{{ q('cdc__pos') }}) over ({{ w }}) as cdc_prev_pos,
        lag(cdc_events.{{ q('cdc__row_hash') }}) over ({{ w }}) as cdc_prev_hash,
        lead(cdc_events.{{ q('cdc__pos') }}) over ({{ w }}) as cdc_next_pos
      from cdc_events
    )
    select cdc_ordered.{{ q('cdc__pos') }}, cdc_ordered.{{ q('cdc__key_hash') }},
      case
        when cdc_ordered.{{ q('cdc__pos') }} = 0 then 'target'
        when cdc_ordered.cdc_prev_pos is null then 'insert'
        {%- if full %}
        when cdc_ordered.cdc_prev_pos < cdc_ordered.{{ q('cdc__pos') }} - 1 then 'insert'
        {%- endif %}
        when cdc_ordered.cdc_prev_hash = cdc_ordered.{{ q('cdc__row_hash') }} then 'unchanged'
        else 'update'
      end as {{ q('cdc__action') }},
      {%- if full %}
      case
        when cdc_ordered.{{ q('cdc__pos') }} < cdc_n.cdc_n
             and (cdc_ordered.cdc_next_pos is null
                  or cdc_ordered.cdc_next_pos > cdc_ordered.{{ q('cdc__pos') }} + 1)
        then cdc_ordered.{{ q('cdc__pos') }} + 1
      end as {{ q('cdc__deleted_by') }}
      {%- else %}
      cast(null as {{ dbt.type_bigint() }}) as {{ q('cdc__deleted_by') }}
      {%- endif %}
    from cdc_ordered cross join cdc_n
  {%- endset -%}
  {{ return(cdc.create_scratch_sql(ctx.batch, sql)) }}
{% endmacro %}

{% macro apply_snapshot_merge_sql(ctx) %}
  {{ return(adapter.dispatch('apply_snapshot_merge_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_snapshot_merge_sql(ctx) %}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {%- set S, D = 'DBT_INTERNAL_SOURCE', 'DBT_INTERNAL_DEST' -%}
  {%- set full = ctx.kind == 'full' -%}
  {%- set items = cdc._snapshot_row_items(ctx, S) -%}
  {%- set pos, action = q('cdc__pos'), q('cdc__action') -%}
  {%- set sql -%}
    merge into {{ ctx.target }} as {{ D }}
    using (
      select cdc_src.*, cdc_keys.{{ q('cdc__key_hash') }} as {{ q('cdc__merge_key') }},
        cdc_keys.{{ q('cdc__final') }},
        case when cdc_keys.cdc_insert_pos = cdc_keys.cdc_change_pos then 'I' else 'U' end as {{ q('cdc__operation') }}
      from (
        select cdc_k.*,
          case
            {%- if full %}
            when cdc_k.cdc_first_pos = 0 and cdc_k.cdc_last_pos < cdc_n.cdc_n then 'delete'
            when cdc_k.cdc_change_pos is not null and cdc_k.cdc_last_pos = cdc_n.cdc_n then 'upsert'
            {%- else %}
            when cdc_k.cdc_change_pos is not null then 'upsert'
            {%- endif %}
          end as {{ q('cdc__final') }}
        from (
          select {{ q('cdc__key_hash') }},
            min({{ pos }}) as cdc_first_pos,
            max({{ pos }}) as cdc_last_pos,
            max(case when {{ action }} in ('insert', 'update') then {{ pos }} end) as cdc_change_pos,
            max(case when {{ action }} = 'insert' then {{ pos }} end) as cdc_insert_pos
          from {{ ctx.batch }}
          group by {{ q('cdc__key_hash') }}
        ) as cdc_k
        cross join (
          select count(*) as cdc_n from {{ ctx.batch_files }} where {{ q('cdc__stale') }} = 0
        ) as cdc_n
      ) as cdc_keys
      left join {{ ctx.batch_files }} as cdc_file
        on cdc_file.{{ pos }} = cdc_keys.cdc_change_pos and cdc_file.{{ q('cdc__stale') }} = 0
      left join {{ ctx.source }} as cdc_src
        on cdc_src.{{ lin.file_hash }} = cdc_file.{{ q('file_hash') }}
        and cdc_src.{{ lin.key_hash }} = cdc_keys.{{ q('cdc__key_hash') }}
      {{ cdc.snapshot_guard_join(ctx) }}
      where cdc_keys.{{ q('cdc__final') }} is not null
    ) as {{ S }}
    on {{ D }}.{{ lin.key_hash }} = {{ S }}.{{ q('cdc__merge_key') }}
    {%- if full %}
    when matched and {{ S }}.{{ q('cdc__final') }} = 'delete' then delete
    {%- endif %}
    when matched and {{ S }}.{{ q('cdc__final') }} = 'upsert' then update set
      {%- for item in items %}
      {{ item.column }} = {{ item.value }}{{ ',' if not loop.last }}
      {%- endfor %}
    when not matched and {{ S }}.{{ q('cdc__final') }} = 'upsert' then {{ cdc._insert_values(items) }}
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}

{#- A target row from the MERGE source `S`: the model's columns (the operation from the
    classification: I or U) and the columns the apply fills. -#}
{% macro _snapshot_row_items(ctx, S) %}
  {%- set items = [] -%}
  {%- for c in ctx.model_columns -%}
    {%- do items.append({'column': c, 'value': (S ~ '.' ~ adapter.quote('cdc__operation')) if c == ctx.lin.operation else (S ~ '.' ~ c)}) -%}
  {%- endfor -%}
  {%- do items.extend(ctx.applied_set) -%}
  {{ return(items) }}
{% endmacro %}

{#- The MERGE's `insert (...) values (...)` of a list of {column, value}. -#}
{% macro _insert_values(items) -%}
  insert ({% for item in items %}{{ item.column }}{{ ', ' if not loop.last }}{% endfor %})
    values ({% for item in items %}{{ item.value }}{{ ', ' if not loop.last }}{% endfor %})
{%- endmacro %}

{% macro apply_snapshot_history_sql(ctx) %}
  {{ return(adapter.dispatch('apply_snapshot_history_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_snapshot_history_sql(ctx) %}
  {%- set q, lin = adapter.quote, ctx.lin -%}
  {%- set S, D = 'DBT_INTERNAL_SOURCE', 'DBT_INTERNAL_DEST' -%}
  {%- set items = cdc._snapshot_row_items(ctx, S) -%}
  {%- do items.append({'column': lin.valid_from, 'value': S ~ '.' ~ lin.sequence}) -%}
  {%- do items.append({'column': lin.valid_to, 'value': S ~ '.' ~ q('cdc__valid_to')}) -%}
  {%- do items.append({'column': lin.closed_process_id, 'value': S ~ '.' ~ q('cdc__closed_by')}) -%}
  {%- set pos, action, key = q('cdc__pos'), q('cdc__action'), q('cdc__key_hash') -%}
  {%- set sql -%}
    merge into {{ ctx.target }} as {{ D }}
    using (
      with cdc_bounds as (
        {#- Where each key's versions start (the open version: position 0) and where a full
            extract deleted it; positions of one key never repeat. #}
        select {{ key }}, {{ pos }}, {{ action }}
        from {{ ctx.batch }}
        where {{ action }} in ('target', 'insert', 'update')
        union all
        select {{ key }}, {{ q('cdc__deleted_by') }}, 'delete'
        from {{ ctx.batch }}
        where {{ q('cdc__deleted_by') }} is not null
      ),
      cdc_versions as (
        select cdc_bounds.*,
          lead(cdc_bounds.{{ pos }}) over (partition by cdc_bounds.{{ key }} order by cdc_bounds.{{ pos }}) as cdc_end_pos
        from cdc_bounds
      )
      select cdc_src.*,
        case when cdc_versions.{{ pos }} = 0 then cdc_versions.{{ key }} end as {{ q('cdc__merge_key') }},
        case when cdc_versions.{{ action }} = 'insert' then 'I' else 'U' end as {{ q('cdc__operation') }},
        {{ cdc._valid_to_or_current(ctx, 'cdc_end.' ~ q('effective_date')) }} as {{ q('cdc__valid_to') }},
        cdc_end.{{ q('process_id') }} as {{ q('cdc__closed_by') }}
      from cdc_versions
      left join {{ ctx.batch_files }} as cdc_end
        on cdc_end.{{ pos }} = cdc_versions.cdc_end_pos and cdc_end.{{ q('cdc__stale') }} = 0
      left join {{ ctx.batch_files }} as cdc_start
        on cdc_start.{{ pos }} = cdc_versions.{{ pos }} and cdc_start.{{ q('cdc__stale') }} = 0
      left join {{ ctx.source }} as cdc_src
        on cdc_src.{{ lin.file_hash }} = cdc_start.{{ q('file_hash') }}
        and cdc_src.{{ lin.key_hash }} = cdc_versions.{{ key }}
      {{ cdc.snapshot_guard_join(ctx) }}
      where cdc_versions.{{ action }} <> 'delete'
        and (cdc_versions.{{ pos }} > 0 or cdc_versions.cdc_end_pos is not null)
    ) as {{ S }}
    on {{ D }}.{{ lin.key_hash }} = {{ S }}.{{ q('cdc__merge_key') }} and {{ cdc._is_open(D, lin.valid_to, ctx.valid_to_current) }}
    when matched then update set
      {{ lin.valid_to }} = {{ S }}.{{ q('cdc__valid_to') }},
      {{ lin.closed_process_id }} = {{ S }}.{{ q('cdc__closed_by') }}
    when not matched and {{ S }}.{{ q('cdc__merge_key') }} is null then {{ cdc._insert_values(items) }}
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}

{% macro apply_snapshot_markers_sql(ctx) %}
  {{ return(adapter.dispatch('apply_snapshot_markers_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_snapshot_markers_sql(ctx) %}
  {%- set q = adapter.quote -%}
  {%- set pos, action = q('cdc__pos'), q('cdc__action') -%}
  {%- set joins -%}
    left join (
      select {{ pos }} as cdc_pos,
        sum(case when {{ action }} = 'insert' then 1 else 0 end) as n_insert,
        sum(case when {{ action }} = 'update' then 1 else 0 end) as n_update
      from {{ ctx.batch }}
      group by {{ pos }}
    ) as cdc_counts on cdc_counts.cdc_pos = cdc_files.{{ pos }} and cdc_files.{{ q('cdc__stale') }} = 0
    left join (
      select {{ q('cdc__deleted_by') }} as cdc_pos, count(*) as n_delete
      from {{ ctx.batch }}
      where {{ q('cdc__deleted_by') }} is not null
      group by {{ q('cdc__deleted_by') }}
    ) as cdc_deleted on cdc_deleted.cdc_pos = cdc_files.{{ pos }} and cdc_files.{{ q('cdc__stale') }} = 0
  {%- endset -%}
  {{ return(cdc._insert_markers(ctx, joins, {
      'rows_inserted': 'coalesce(cdc_counts.n_insert, 0)',
      'rows_updated': 'coalesce(cdc_counts.n_update, 0)',
      'rows_deleted': 'coalesce(cdc_deleted.n_delete, 0)',
      'rows_skipped': 'cdc_files.' ~ q('cdc__rows') ~ ' - coalesce(cdc_counts.n_insert, 0) - coalesce(cdc_counts.n_update, 0)',
  })) }}
{% endmacro %}

{#- Where builds of one table run side by side without a lock (Spark destinations: each
    statement its own commit), the snapshot MERGE refuses to run on a batch another build has
    applied since this one chose it: a batch File with a marker for this target now (its staged
    rows are no longer unapplied), or, for a history, with versions in the target now (this
    build's classification was made before them). The build fails, saying it lost the race,
    and commits nothing; run again, it finds the markers. Its MERGE reads the target once, so
    a build that commits after this check is Iceberg's conflict. '' elsewhere (PostgreSQL:
    the advisory lock; BigQuery: one transaction). A join clause for the MERGE's source, which
    must keep `cdc_guard.cdc_ok = 1` rows (all of them, when nothing is wrong). -#}
{% macro snapshot_guard_join(ctx) %}
  {{ return(adapter.dispatch('snapshot_guard_join', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__snapshot_guard_join(ctx) %}{{ return('') }}{% endmacro %}
{% macro databricks__snapshot_guard_join(ctx) %}{{ return(cdc.spark__snapshot_guard_join(ctx)) }}{% endmacro %}
{% macro spark__snapshot_guard_join(ctx) %}
  {%- set q = adapter.quote -%}
  {%- set message = 'cdc: another build applied Files of ' ~ ctx.target_name ~ ' while this build ran; run again' -%}
  {%- set sql -%}
    inner join (
      select case when sum(cdc_g.cdc_n) = 0 then 1
        else raise_error({{ cdc.sql_string(message) }}) end as cdc_ok
      from (
        select count(*) as cdc_n
        from {{ ctx.batch_files }} as cdc_f
        join {{ ctx.markers }} as cdc_m
          on cdc_m.{{ q('file_hash') }} = cdc_f.{{ q('file_hash') }} and cdc_m.{{ q('target_table') }} = {{ ctx.this_table }}
        where cdc_f.{{ q('cdc__stale') }} = 0
        {%- if ctx.history %}
        union all
        select count(*) as cdc_n
        from {{ ctx.batch_files }} as cdc_f
        join {{ ctx.target }} as cdc_d on cdc_d.{{ ctx.lin.file_hash }} = cdc_f.{{ q('file_hash') }}
        where cdc_f.{{ q('cdc__stale') }} = 0
        {%- endif %}
      ) as cdc_g
    ) as cdc_guard on cdc_guard.cdc_ok = 1
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
