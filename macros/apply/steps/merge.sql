{#- Apply steps `merge_target` and `merge_tombstones` (the order of all steps:
    apply/statements.sql). -#}

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
