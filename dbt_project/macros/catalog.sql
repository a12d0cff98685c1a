{#- Spark destinations on Iceberg: list views too and describe them as views, so they are in
    dbt's relation cache and in `dbt docs generate` with their columns; tables of an Iceberg
    catalog listed without a DESCRIBE each (macros/common/spark_views.sql). dbt-spark calls
    these macros by name, and only the root project can replace such a macro. -#}
{% macro spark__list_relations_without_caching(relation) %}
  {{ return(cdc.spark_list_relations(relation)) }}
{% endmacro %}

{% macro list_relations_show_tables_without_caching(schema_relation) %}
  {{ return(cdc.show_tables_and_views(schema_relation)) }}
{% endmacro %}

{% macro describe_table_extended_without_caching(table_name) %}
  {{ return(cdc.describe_with_view_type(table_name)) }}
{% endmacro %}
