{#- Apply step `batch_files` (the order of all steps: apply/statements.sql). -#}

{#- The Files of this batch. A File with rows must have them in the source (so a File staged
    while this runs waits for the next run); a File without rows needs none. -#}
{% macro apply_batch_files_sql(ctx) %}
  {{ return(adapter.dispatch('apply_batch_files_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_batch_files_sql(ctx) %}
  {{ return(cdc.create_scratch_sql(ctx.batch_files, cdc.batch_files_select(ctx))) }}
{% endmacro %}

{#- Spark: the Files are read now, as the statements are rendered (nothing runs before this
    step there), and kept as literals in a temporary view of the session: a few rows that would
    otherwise be an Iceberg table written, committed and purged by every apply. -#}
{% macro spark__apply_batch_files_sql(ctx) %}
  {%- if ctx.batch_files.schema is not none or not execute -%}
    {{ return(cdc.default__apply_batch_files_sql(ctx)) }}
  {%- endif -%}
  {%- set found = run_query(cdc.batch_files_select(ctx)) -%}
  {%- do ctx.update({'batch_hashes': found.columns[0].values() | list}) -%}
  {#- the columns as batch_files_select names them: three strings, then the counts -#}
  {{ return(cdc.spark_rows_view_sql(ctx.batch_files, found, ['string', 'string', 'string', 'bigint', 'bigint'])) }}
{% endmacro %}

{#- PostgreSQL: the batch's File hashes are read as the statements are rendered (in the model's
    transaction, under the apply's lock), so that the statements name them as literals and the
    staged table is read through its index by File, not scanned whole (every File ever staged
    and kept) to find the batch's rows. The Files themselves are still a scratch table, with
    their row counts. -#}
{% macro postgres__apply_batch_files_sql(ctx) %}
  {%- if execute and cdc.is_apply_model() -%}
    {%- set sql = cdc.unmarked_files_sql(ctx.files, ctx.markers, ctx.entity, ctx.this_table) -%}
    {%- do ctx.update({'batch_hashes': run_query(sql).columns[0].values() | list}) -%}
  {%- endif -%}
  {{ return(cdc.default__apply_batch_files_sql(ctx)) }}
{% endmacro %}

{#- Whether the batch's hashes are written out as literals (in_batch_files). -#}
{% macro _batch_literals(ctx) %}
  {%- set hashes = ctx.get('batch_hashes') -%}
  {{ return(hashes and hashes | length <= 200) }}
{% endmacro %}

{#- `column` (a File hash) is one of the batch's Files. Where the batch's hashes were read as
    the statements were rendered (Spark), they are written out as literals: an Iceberg scan
    of the staged rows then reads only the data files of those Files (their hash's min and
    max), where a subquery makes it read every staged row. Past 200 Files Iceberg no longer
    prunes by an IN list, and the subquery is kept. -#}
{% macro in_batch_files(ctx, column) %}
  {%- if cdc._batch_literals(ctx) -%}
    {%- set literals = [] -%}
    {%- for h in ctx.batch_hashes -%}{%- do literals.append(cdc.sql_string(h)) -%}{%- endfor -%}
    {{ return(column ~ ' in (' ~ literals | join(', ') ~ ')') }}
  {%- endif -%}
  {{ return(column ~ ' in (select ' ~ adapter.quote('file_hash') ~ ' from ' ~ ctx.batch_files ~ ')') }}
{% endmacro %}

{#- Spark: `create or replace temporary view <relation>` of the rows of `found` (a query's
    result) as literals, its columns typed in turn as `types` say (string, date or an integer
    type); with no rows, an empty select of those columns. -#}
{% macro spark_rows_view_sql(relation, found, types) %}
  {%- set quoted = [] -%}
  {%- for name in found.column_names -%}{%- do quoted.append(adapter.quote(name)) -%}{%- endfor -%}
  {%- set rows = [] -%}
  {%- for r in found.rows -%}
    {%- set values = [] -%}
    {%- for v in r.values() -%}
      {%- set kind = types[loop.index0] -%}
      {%- if v is none -%}
        {%- do values.append('cast(null as ' ~ kind ~ ')') -%}
      {%- elif kind == 'string' -%}
        {%- do values.append(cdc.sql_string(v)) -%}
      {%- elif kind == 'date' -%}
        {%- do values.append('date ' ~ cdc.sql_string(v.isoformat()[:10])) -%}
      {%- else -%}
        {%- do values.append('cast(' ~ (v | int) ~ ' as ' ~ kind ~ ')') -%}
      {%- endif -%}
    {%- endfor -%}
    {%- do rows.append('(' ~ values | join(', ') ~ ')') -%}
  {%- endfor -%}
  {%- if rows -%}
    {%- set body = 'select * from values ' ~ rows | join(',\n      ') ~ ' as cdc_rows(' ~ quoted | join(', ') ~ ')' -%}
  {%- else -%}
    {%- set empty = [] -%}
    {%- for name in quoted -%}
      {%- do empty.append('cast(null as ' ~ types[loop.index0] ~ ') as ' ~ name) -%}
    {%- endfor -%}
    {%- set body = 'select ' ~ empty | join(', ') ~ ' where false' -%}
  {%- endif -%}
  {{ return('create or replace temporary view ' ~ relation ~ ' as ' ~ body) }}
{% endmacro %}

{#- The Files of this batch, each with its row count (and held rows) in the model's source. -#}
{% macro batch_files_select(ctx) %}
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
      {%- if cdc._batch_literals(ctx) %}
      where {{ cdc.in_batch_files(ctx, 'cdc_src.' ~ ctx.lin.file_hash) }}
      {%- endif %}
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
  {{ return(sql) }}
{% endmacro %}

{#- Where the batch's Files are kept: a scratch table, or on Spark (not Databricks) a temporary
    view, which has no schema. -#}
{% macro batch_files_relation(target, mode) %}
  {{ return(adapter.dispatch('batch_files_relation', 'cdc')(target, mode)) }}
{% endmacro %}
{% macro default__batch_files_relation(target, mode) %}
  {{ return(cdc.scratch_relation(target, 'files')) }}
{% endmacro %}
{% macro databricks__batch_files_relation(target, mode) %}
  {{ return(cdc.scratch_relation(target, 'files')) }}
{% endmacro %}
{#- A temporary view has no schema: its name carries a hash of the target's schema and name, so
    that two apply models of one name in two schemas, built at once in one session (threads),
    never share it. -#}
{% macro spark__batch_files_relation(target, mode) %}
  {%- set tag = local_md5((target.schema ~ '.' ~ target.identifier) | lower)[:12] -%}
  {{ return(api.Relation.create(identifier=target.identifier ~ '__cdc_files_' ~ tag, type='view')) }}
{% endmacro %}

{#- The drop of that temporary view, at the end of the apply ('' where there is none). -#}
{% macro drop_batch_files_view_sql(target, mode) %}
  {%- set rel = cdc.batch_files_relation(target, mode) -%}
  {{ return('drop view if exists ' ~ rel if rel.schema is none else '') }}
{% endmacro %}
