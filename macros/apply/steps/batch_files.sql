{#- Apply step `batch_files` (the order of all steps: apply/statements.sql). -#}

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
