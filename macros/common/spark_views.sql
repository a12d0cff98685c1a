{#- dbt-spark lists the relations of a schema on an Iceberg catalog with SHOW TABLES (SHOW TABLE
    EXTENDED is refused for v2 tables), which names tables only: Iceberg views are missing from
    dbt's relation cache and from `dbt docs generate`'s catalog. This adds SHOW VIEWS (the
    persistent ones: a session's temporary views belong to no schema), same three columns.
    Each relation is then described by dbt-spark itself (DESCRIBE EXTENDED: Type VIEW, columns
    with types). dbt calls this macro by its bare name, which only the root project can
    override: dbt_project/macros/catalog.sql forwards to it. -#}
{% macro show_tables_and_views(schema_relation) %}
  {% call statement('list_relations_without_caching_show_tables', fetch_result=True) -%}
    show tables in {{ schema_relation.schema }} like '*'
  {% endcall %}
  {%- set tables = load_result('list_relations_without_caching_show_tables').table -%}
  {% call statement('cdc_list_views', fetch_result=True) -%}
    show views in {{ schema_relation.schema }} like '*'
  {% endcall %}
  {%- set views = load_result('cdc_list_views').table.where(cdc._persistent_view) -%}
  {% do return(tables.merge([tables, views.rename(column_names=tables.column_names)])) %}
{% endmacro %}

{#- agate's where() keeps the rows for which this returns something non-empty. -#}
{% macro _persistent_view(row) -%}
  {%- if not row[2] %}persistent{% endif -%}
{%- endmacro %}

{#- DESCRIBE EXTENDED of an Iceberg view has no `Type: VIEW` line, the one dbt-spark reads the
    relation type from (a view taken for a table would be dropped with DROP TABLE): add it. -#}
{% macro describe_with_view_type(table_name) %}
  {% call statement('describe_table_extended_without_caching', fetch_result=True) -%}
    describe extended {{ table_name }}
  {% endcall %}
  {%- set described = load_result('describe_table_extended_without_caching').table -%}
  {%- if '# Detailed View Information' not in described.columns[0].values() -%}
    {% do return(described) %}
  {%- endif -%}
  {% call statement('cdc_view_type', fetch_result=True) -%}
    select 'Type' as col_name, 'VIEW' as data_type, '' as comment
  {% endcall %}
  {%- set view_type = load_result('cdc_view_type').table -%}
  {% do return(described.merge([described, view_type.rename(column_names=described.column_names)])) %}
{% endmacro %}
