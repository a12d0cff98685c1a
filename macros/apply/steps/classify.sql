{#- Apply step `classify` and the expressions it is built from (the order of all steps:
    apply/statements.sql). -#}

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
      where {{ cdc.in_batch_files(ctx, 'cdc_src.' ~ lin.file_hash) }}
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
    left join {{ cdc.apply_dest_rows(ctx) }} as cdc_dest
      on {{ cdc._on_keys(ctx.key_columns, 'cdc_dest', alias) }}
      {%- if ctx.truncates %}
      and ({{ alias }}.{{ q('cdc__watermark') }} is null or cdc_dest.{{ lin.sequence }} > {{ alias }}.{{ q('cdc__watermark') }})
      {%- endif %}
    left join {{ ctx.tombstones }} as cdc_tomb
      on cdc_tomb.{{ q('target_table') }} = {{ ctx.this_table }}
      and cdc_tomb.{{ q('key_text') }} = {{ cdc._key_text(alias, ctx.key_columns) }}
{%- endmacro %}

{#- The target rows the classification joins (alias cdc_dest). On Spark, only the rows of the
    batch's keys, by a semi join with the batch's staged keys: with the runtime bloom filter
    settings of profiles.example.yml, Spark filters the target's scan by those keys before
    its shuffle, where a plain join shuffles and sorts every target row. -#}
{% macro apply_dest_rows(ctx) %}
  {{ return(adapter.dispatch('apply_dest_rows', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_dest_rows(ctx) %}
  {{ return(ctx.target) }}
{% endmacro %}
{% macro spark__apply_dest_rows(ctx) %}
  {%- set keys = ctx.key_columns | join(', ') -%}
  {%- set sql -%}
    (select * from {{ ctx.target }}
     where ({{ keys }}) in (
       select {% for k in ctx.key_columns %}cdc_keys.{{ k }}{{ ', ' if not loop.last }}{% endfor %}
       from {{ ctx.source }} as cdc_keys
       where {{ cdc.in_batch_files(ctx, 'cdc_keys.' ~ ctx.lin.file_hash) }}
     ))
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}

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
