{#- Apply steps `truncate` and `truncate_target` (the order of all steps: apply/statements.sql). -#}

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
      where {{ cdc.in_batch_files(ctx, 'cdc_src.' ~ lin.file_hash) }}
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
