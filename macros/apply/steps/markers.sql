{#- Apply step `insert_markers`: the Applied File Markers, and the INSERT (or MERGE) every apply
    path (current state, history, snapshot) shares to write them. -#}

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
    row-level operation and validates it (serializable): of two applies of one table racing
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
