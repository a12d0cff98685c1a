{#- Apply steps `lock` and `dedupe_target` (the order of all steps: apply/statements.sql). -#}

{#- Serialises applies of one table where the destination has locks: PostgreSQL takes a
    transaction-scoped advisory lock, so a second `dbt build` waits, then finds the markers and
    applies nothing. Spark, Databricks and BigQuery rely on their optimistic commits instead (a
    concurrent MERGE into the same table fails) and on the marker guard of insert_markers. -#}
{% macro apply_lock_sql(ctx) %}
  {{ return(adapter.dispatch('apply_lock_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_lock_sql(ctx) %}{{ return('') }}{% endmacro %}
{% macro postgres__apply_lock_sql(ctx) %}
  {{ return(cdc.postgres_apply_lock(ctx.target_name)) }}
{% endmacro %}
{#- The lock itself, by target name: also taken before the model's rows are selected
    (postgres__create_table_as), so that a build that waited reads what the other committed. -#}
{% macro postgres_apply_lock(target_name) %}
  {{ return('select pg_advisory_xact_lock(hashtextextended(' ~ cdc.sql_string('cdc apply ' ~ target_name) ~ ', 0))') }}
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
  {%- set keep = cdc.scratch_relation(ctx.target, 'dedupe', ctx.scratch_catalog) -%}
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
