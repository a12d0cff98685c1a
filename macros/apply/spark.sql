{#- dbt-spark (1.11): the merge strategy and the first-run CTAS of apply models. Other models
    get dbt-spark's own macros unchanged. -#}

{% macro spark__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) %}
  {%- if cdc.is_apply_model() -%}
    {{ return(cdc.spark_family_apply(target, source)) }}
  {%- endif -%}
  {{ return(dbt.spark__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates)) }}
{% endmacro %}

{% macro spark__create_table_as(temporary, relation, compiled_code, language='sql') %}
  {%- if temporary or language != 'sql' or not cdc.is_apply_model() -%}
    {{ return(dbt.spark__create_table_as(temporary, relation, compiled_code, language)) }}
  {%- endif -%}
  {%- set create = dbt.spark__create_table_as(false, relation, cdc.empty_target_select(compiled_code), 'sql') -%}
  {{ return(cdc.spark_family_apply(relation, compiled_code, create)) }}
{% endmacro %}

{#- The TBLPROPERTIES of an apply model's Iceberg table when it is created: merge-on-read, so
    that a MERGE writes the rows it changes and a delete file, not every data file that holds
    one of its keys (readers apply the delete files until `runner maintain` folds them in).
    The model's own `tblproperties` win, e.g. {'write.merge.mode': 'copy-on-write'}. Other
    models, and other file formats, get dbt-spark's clause unchanged. -#}
{% macro spark__tblproperties_clause() %}
  {%- if config.get('file_format') != 'iceberg' or not cdc.is_apply_model() -%}
    {{ return(dbt.spark__tblproperties_clause()) }}
  {%- endif -%}
  {%- set props = cdc.merge_on_read_properties() -%}
  {%- do props.update(config.get('tblproperties') or {}) -%}
  {{ return(cdc.tblproperties_sql(props)) }}
{% endmacro %}
