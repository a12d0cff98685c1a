{#- Forks of dbt's snapshot merge macros, for snapshots that ask for process ids (others get
    dbt's own). Each says where it comes from; lines marked "-- cdc" are the only additions: the
    closing process id and time, set with valid_to, and (for every snapshot) the source's
    widened column types applied to the table first (macros/apply/schema_change.sql). -#}

{#- dbt-spark 1.11 dbt/include/spark/macros/materializations/snapshot.sql (spark, databricks) -#}
{% macro spark__snapshot_merge_sql(target, source, insert_cols) -%}
    {%- do cdc.widen_columns(target, source) -%}  {#- -- cdc: widened types -#}
    {%- if not cdc.snapshot_has_process_ids() -%}
      {{ return(dbt.spark__snapshot_merge_sql(target, source, insert_cols)) }}
    {%- endif -%}
    {%- set columns = config.get("snapshot_table_column_names") or get_snapshot_table_column_names() -%}

    merge into {{ target }} as DBT_INTERNAL_DEST
    {% if target.is_iceberg %}
      {# create view only supports a name (no catalog, or schema) #}
      using {{ source.identifier }} as DBT_INTERNAL_SOURCE
    {% else %}
      using {{ source }} as DBT_INTERNAL_SOURCE
    {% endif %}
    on DBT_INTERNAL_SOURCE.{{ columns.dbt_scd_id }} = DBT_INTERNAL_DEST.{{ columns.dbt_scd_id }}
    when matched
     {% if config.get("dbt_valid_to_current") %}
       and ( DBT_INTERNAL_DEST.{{ columns.dbt_valid_to }} = {{ config.get('dbt_valid_to_current') }} or
             DBT_INTERNAL_DEST.{{ columns.dbt_valid_to }} is null )
     {% else %}
       and DBT_INTERNAL_DEST.{{ columns.dbt_valid_to }} is null
     {% endif %}
     and DBT_INTERNAL_SOURCE.dbt_change_type in ('update', 'delete')
        then update
        set {{ columns.dbt_valid_to }} = DBT_INTERNAL_SOURCE.{{ columns.dbt_valid_to }},
        {{ cdc.snapshot_close_set() }}  -- cdc

    when not matched
     and DBT_INTERNAL_SOURCE.dbt_change_type = 'insert'
        then insert *
    ;
{% endmacro %}

{#- dbt-postgres 1.11 dbt/include/postgres/macros/materializations/snapshot_merge.sql -#}
{% macro postgres__snapshot_merge_sql(target, source, insert_cols) -%}
    {%- do cdc.widen_columns(target, source) -%}  {#- -- cdc: widened types -#}
    {%- if not cdc.snapshot_has_process_ids() -%}
      {{ return(dbt.postgres__snapshot_merge_sql(target, source, insert_cols)) }}
    {%- endif -%}
    {%- set insert_cols_csv = insert_cols | join(', ') -%}

    {%- set columns = config.get("snapshot_table_column_names") or get_snapshot_table_column_names() -%}

    update {{ target }}
    set {{ columns.dbt_valid_to }} = DBT_INTERNAL_SOURCE.{{ columns.dbt_valid_to }},
    {{ cdc.snapshot_close_set() }}  -- cdc
    from {{ source }} as DBT_INTERNAL_SOURCE
    where DBT_INTERNAL_SOURCE.{{ columns.dbt_scd_id }}::text = {{ target }}.{{ columns.dbt_scd_id }}::text
      and DBT_INTERNAL_SOURCE.dbt_change_type::text in ('update'::text, 'delete'::text)
      {% if config.get("dbt_valid_to_current") %}
        and ({{ target }}.{{ columns.dbt_valid_to }} = {{ config.get('dbt_valid_to_current') }} or {{ target }}.{{ columns.dbt_valid_to }} is null);
      {% else %}
        and {{ target }}.{{ columns.dbt_valid_to }} is null;
      {% endif %}


    insert into {{ target }} ({{ insert_cols_csv }})
    select {% for column in insert_cols -%}
        DBT_INTERNAL_SOURCE.{{ column }} {%- if not loop.last %}, {%- endif %}
    {%- endfor %}
    from {{ source }} as DBT_INTERNAL_SOURCE
    where DBT_INTERNAL_SOURCE.dbt_change_type::text = 'insert'::text;
{% endmacro %}

{#- dbt-core 1.11 dbt/include/global_project/macros/materializations/snapshots/snapshot_merge.sql
    (bigquery) -#}
{% macro default__snapshot_merge_sql(target, source, insert_cols) -%}
    {%- do cdc.widen_columns(target, source) -%}  {#- -- cdc: widened types -#}
    {%- if not cdc.snapshot_has_process_ids() -%}
      {{ return(dbt.default__snapshot_merge_sql(target, source, insert_cols)) }}
    {%- endif -%}
    {%- set insert_cols_csv = insert_cols | join(', ') -%}

    {%- set columns = config.get("snapshot_table_column_names") or get_snapshot_table_column_names() -%}

    merge into {{ target.render() }} as DBT_INTERNAL_DEST
    using {{ source }} as DBT_INTERNAL_SOURCE
    on DBT_INTERNAL_SOURCE.{{ columns.dbt_scd_id }} = DBT_INTERNAL_DEST.{{ columns.dbt_scd_id }}

    when matched
     {% if config.get("dbt_valid_to_current") %}
	{% set source_unique_key = ("DBT_INTERNAL_DEST." ~ columns.dbt_valid_to) | trim %}
	{% set target_unique_key = config.get('dbt_valid_to_current') | trim %}
	and ({{ equals(source_unique_key, target_unique_key) }} or {{ source_unique_key }} is null)

     {% else %}
       and DBT_INTERNAL_DEST.{{ columns.dbt_valid_to }} is null
     {% endif %}
     and DBT_INTERNAL_SOURCE.dbt_change_type in ('update', 'delete')
        then update
        set {{ columns.dbt_valid_to }} = DBT_INTERNAL_SOURCE.{{ columns.dbt_valid_to }},
        {{ cdc.snapshot_close_set() }}  -- cdc

    when not matched
     and DBT_INTERNAL_SOURCE.dbt_change_type = 'insert'
        then insert ({{ insert_cols_csv }})
        values ({{ insert_cols_csv }})

{% endmacro %}
