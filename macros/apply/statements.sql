{#-
  The apply, as a list of SQL statements the adapter-specific wrappers run in order
  (spark.sql, databricks.sql) or as one transaction (postgres.sql, bigquery.sql):

    1. the batch: the Files staged for this entity without a marker for this target, and
       their rows, each classified against the target and the tombstones;
    2. MERGE into the target: insert new keys, update a key only with a newer sequence, delete
       on a newer delete; the last change per key (by sequence) across the whole batch wins;
    3. MERGE into the tombstones: remember each applied delete's key and sequence;
    4. INSERT one Applied File Marker per File, with its row counts.

  Replaying 1-4 after a crash anywhere gives the same target: every change is compared with
  the sequence already in the target or its tombstone, so an applied change is "stale" the
  second time.

  Arguments: target (relation), source (a relation or a parenthesised select with the model's
  columns), columns (the target's columns, api.Column), keys (list), entity (the entity's
  name in the staged-files manifest), target_name (markers' and tombstones' key for this table).
-#}

{% macro apply_statements(target, source, columns, keys, entity, target_name) %}
  {{ return(adapter.dispatch('apply_statements', 'cdc')(target, source, columns, keys, entity, target_name)) }}
{% endmacro %}

{% macro default__apply_statements(target, source, columns, keys, entity, target_name) %}
  {%- set lin = cdc.lineage_columns() -%}
  {%- set st = cdc.state_tables() -%}
  {%- set files_rel = cdc.state_relation('staged_files') -%}
  {%- set markers_rel = cdc.state_relation('applied_files') -%}
  {%- set tomb_rel = cdc.state_relation('tombstones') -%}
  {%- set batch_files = cdc.scratch_relation(target, 'files') -%}
  {%- set batch = cdc.scratch_relation(target, 'batch') -%}
  {%- set apply_only = [lin.invocation_id, lin.applied_at] -%}
  {%- set names = columns | map(attribute='name') | map('lower') | list -%}
  {%- for required in [lin.operation, lin.sequence, lin.process_id, lin.file_hash, lin.row_number] + (keys | map('lower') | list) -%}
    {%- if required not in names -%}
      {{ exceptions.raise_compiler_error(
          "apply of " ~ target_name ~ ": column " ~ required ~ " is missing from the model; select "
          ~ "the key columns and {{ cdc.lineage_select() }} from cdc.unapplied(...)") }}
    {%- endif -%}
  {%- endfor -%}
  {%- set seq_type = (columns | selectattr('name', 'equalto', lin.sequence) | first).data_type -%}
  {%- set model_cols = columns | rejectattr('name', 'in', apply_only) | map(attribute='name') | list -%}
  {%- set q = adapter.quote -%}
  {%- set invocation = cdc.sql_string(invocation_id) -%}
  {%- set this_table = cdc.sql_string(target_name) -%}
  {%- set now = cdc.now_utc() -%}
  {%- set S, D = 'DBT_INTERNAL_SOURCE', 'DBT_INTERNAL_DEST' -%}
  {%- set statements = [] -%}
  {%- set lock = cdc.apply_lock_sql(target_name) -%}
  {%- if lock -%}{%- do statements.append(lock) -%}{%- endif -%}

  {#- 1a. The Files of this batch. A File with rows must have them in the source (so a File
       staged while this runs waits for the next run); a File without rows needs none. -#}
  {%- set sql -%}
    select cdc_files.file_hash, cdc_files.file_name, cdc_files.process_id
    from {{ files_rel }} as cdc_files
    where cdc_files.entity = {{ cdc.sql_string(entity) }}
      and cdc_files.file_hash not in (
        select cdc_markers.file_hash from {{ markers_rel }} as cdc_markers
        where cdc_markers.target_table = {{ this_table }}
      )
      and (
        cdc_files.staged_rows = 0
        or cdc_files.file_hash in (select cdc_src.{{ lin.file_hash }} from {{ source }} as cdc_src)
      )
  {%- endset -%}
  {%- do statements.append(cdc.create_scratch_sql(batch_files, sql)) -%}

  {#- 1b. Their rows: the last change per key wins (ties: later File, later row); each row is
       classified against the target row and the key's tombstone. -#}
  {%- set sql -%}
    with cdc_changes as (
      select
        cdc_src.*,
        row_number() over (
          partition by {% for k in keys %}cdc_src.{{ k }}{{ ', ' if not loop.last }}{% endfor %}
          order by cdc_src.{{ lin.sequence }} desc, cdc_src.{{ lin.file_hash }} desc,
                   cdc_src.{{ lin.row_number }} desc
        ) as cdc__rank
      from {{ source }} as cdc_src
      where cdc_src.{{ lin.file_hash }} in (select file_hash from {{ batch_files }})
    )
    select
      cdc_changes.*,
      {{ cdc.key_text('cdc_changes', keys) }} as cdc__key_text,
      case
        when cdc_changes.cdc__rank > 1 then 'superseded'
        when cdc_dest.{{ lin.sequence }} is not null
             and cdc_changes.{{ lin.sequence }} <= cdc_dest.{{ lin.sequence }} then 'stale'
        when cdc_tomb.sequence_text is not null
             and cdc_changes.{{ lin.sequence }} <= cast(cdc_tomb.sequence_text as {{ seq_type }}) then 'stale'
        when cdc_changes.{{ lin.operation }} = 'D' then 'delete'
        when cdc_dest.{{ lin.sequence }} is not null then 'update'
        else 'insert'
      end as cdc__action
    from cdc_changes
    left join {{ target }} as cdc_dest
      on {% for k in keys %}cdc_dest.{{ k }} = cdc_changes.{{ k }}{{ ' and ' if not loop.last }}{% endfor %}
    left join {{ tomb_rel }} as cdc_tomb
      on cdc_tomb.target_table = {{ this_table }}
      and cdc_tomb.key_text = {{ cdc.key_text('cdc_changes', keys) }}
  {%- endset -%}
  {%- do statements.append(cdc.create_scratch_sql(batch, sql)) -%}

  {#- 2. The target. The sequence guards repeat the classification, for safety. -#}
  {%- set sql -%}
    merge into {{ target }} as {{ D }}
    using (
      select * from {{ batch }} where cdc__action in ('insert', 'update', 'delete')
    ) as {{ S }}
    on {% for k in keys %}{{ D }}.{{ k }} = {{ S }}.{{ k }}{{ ' and ' if not loop.last }}{% endfor %}
    when matched and {{ S }}.cdc__action = 'delete'
         and {{ S }}.{{ lin.sequence }} > {{ D }}.{{ lin.sequence }} then delete
    when matched and {{ S }}.cdc__action = 'update'
         and {{ S }}.{{ lin.sequence }} > {{ D }}.{{ lin.sequence }} then update set
      {%- for c in model_cols %}
      {{ q(c) }} = {{ S }}.{{ q(c) }},
      {%- endfor %}
      {{ lin.invocation_id }} = {{ invocation }},
      {{ lin.applied_at }} = {{ now }}
    when not matched and {{ S }}.cdc__action = 'insert' then insert (
      {%- for c in model_cols %}{{ q(c) }}, {% endfor %}{{ lin.invocation_id }}, {{ lin.applied_at }}
    ) values (
      {%- for c in model_cols %}{{ S }}.{{ q(c) }}, {% endfor %}{{ invocation }}, {{ now }}
    )
  {%- endset -%}
  {%- do statements.append(sql) -%}

  {#- 3. Tombstones: a newer delete is remembered, a newer insert or update forgets it. -#}
  {%- set tc = st.tombstones.columns -%}
  {%- set sql -%}
    merge into {{ tomb_rel }} as {{ D }}
    using (
      select cdc__key_text, {{ lin.sequence }}, {{ lin.operation }}, {{ lin.file_hash }}, {{ lin.process_id }}
      from {{ batch }} where cdc__action in ('insert', 'update', 'delete')
    ) as {{ S }}
    on {{ D }}.target_table = {{ this_table }} and {{ D }}.key_text = {{ S }}.cdc__key_text
    when matched and {{ S }}.{{ lin.operation }} <> 'D' then delete
    when matched then update set
      sequence_text = cast({{ S }}.{{ lin.sequence }} as {{ dbt.type_string() }}),
      file_hash = {{ S }}.{{ lin.file_hash }},
      process_id = {{ S }}.{{ lin.process_id }},
      invocation_id = {{ invocation }},
      deleted_at = {{ now }}
    when not matched and {{ S }}.{{ lin.operation }} = 'D' then insert ({{ tc | join(', ') }})
    values (
      {{ this_table }}, {{ S }}.cdc__key_text, cast({{ S }}.{{ lin.sequence }} as {{ dbt.type_string() }}),
      {{ S }}.{{ lin.file_hash }}, {{ S }}.{{ lin.process_id }}, {{ invocation }}, {{ now }}
    )
  {%- endset -%}
  {%- do statements.append(sql) -%}


  {#- 4. One Applied File Marker per File of the batch, after the target changed. -#}
  {%- set sql -%}
    insert into {{ markers_rel }} ({{ st.applied_files.columns | join(', ') }})
    select
      {{ this_table }}, cdc_files.file_hash, cdc_files.file_name, cdc_files.process_id,
      {{ invocation }}, {{ now }},
      coalesce(cdc_counts.n_insert, 0), coalesce(cdc_counts.n_update, 0),
      coalesce(cdc_counts.n_delete, 0), coalesce(cdc_counts.n_skip, 0)
    from {{ batch_files }} as cdc_files
    left join (
      select
        {{ lin.file_hash }} as file_hash,
        sum(case when cdc__action = 'insert' then 1 else 0 end) as n_insert,
        sum(case when cdc__action = 'update' then 1 else 0 end) as n_update,
        sum(case when cdc__action = 'delete' then 1 else 0 end) as n_delete,
        sum(case when cdc__action in ('stale', 'superseded') then 1 else 0 end) as n_skip
      from {{ batch }}
      group by {{ lin.file_hash }}
    ) as cdc_counts on cdc_counts.file_hash = cdc_files.file_hash
    {# Never a second marker, should another apply of this table have written one meanwhile. #}
    where cdc_files.file_hash not in (
      select cdc_markers.file_hash from {{ markers_rel }} as cdc_markers
      where cdc_markers.target_table = {{ this_table }}
    )
  {%- endset -%}
  {%- do statements.append(sql) -%}
  {{ return(statements) }}
{% endmacro %}

{#- Statements that forget this target's markers and tombstones: before (re)creating it. -#}
{% macro reset_statements(target_name) %}
  {{ return([
      'delete from ' ~ cdc.state_relation('applied_files') ~ ' where target_table = ' ~ cdc.sql_string(target_name),
      'delete from ' ~ cdc.state_relation('tombstones') ~ ' where target_table = ' ~ cdc.sql_string(target_name),
  ]) }}
{% endmacro %}

{#- Serialises applies of one table where the destination has locks: PostgreSQL takes a
    transaction-scoped advisory lock, so a second `dbt build` waits, then finds the markers and
    applies nothing. Spark, Databricks and BigQuery rely on their optimistic commits instead (a
    concurrent MERGE into the same table fails) and on the marker guard in step 4. -#}
{% macro apply_lock_sql(target_name) %}
  {{ return(adapter.dispatch('apply_lock_sql', 'cdc')(target_name)) }}
{% endmacro %}
{% macro default__apply_lock_sql(target_name) %}{{ return('') }}{% endmacro %}
{% macro postgres__apply_lock_sql(target_name) %}
  {{ return('select pg_advisory_xact_lock(hashtextextended(' ~ cdc.sql_string('cdc apply ' ~ target_name) ~ ', 0))') }}
{% endmacro %}

{#- A key as one string: each part length-prefixed, so ('a|b', 'c') and ('a', 'b|c') differ. -#}
{% macro key_text(alias, keys) %}
  {%- set s = dbt.type_string() -%}
  {%- for k in keys -%}
    cast(length(cast({{ alias }}.{{ k }} as {{ s }})) as {{ s }}) || ':' || cast({{ alias }}.{{ k }} as {{ s }})
    {{- " || '|' || " if not loop.last }}
  {%- endfor -%}
{% endmacro %}

{#- The select that creates an apply model's table empty, with the apply-only columns. -#}
{% macro empty_target_select(sql) %}
  {%- set lin = cdc.lineage_columns() -%}
  select cdc_model.*,
    cast(null as {{ dbt.type_string() }}) as {{ lin.invocation_id }},
    cast(null as {{ dbt.type_timestamp() }}) as {{ lin.applied_at }}
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
