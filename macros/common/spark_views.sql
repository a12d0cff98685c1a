{#- dbt-spark lists the relations of a schema on an Iceberg catalog with SHOW TABLES (SHOW TABLE
    EXTENDED is refused for v2 tables), which names tables only: Iceberg views are missing from
    dbt's relation cache and from `dbt docs generate`'s catalog. This adds SHOW VIEWS (the
    persistent ones: a session's temporary views belong to no schema). dbt-spark unpacks each
    row as (schema, name, is_temporary), then describes each relation itself.
    dbt calls this macro by its bare name, which only the root project can override:
    dbt_project/macros/catalog.sql forwards to it. Rows are returned as plain lists (an agate
    merge fails when one side is empty and its column types differ). -#}
{% macro show_tables_and_views(schema_relation) %}
  {% call statement('list_relations_without_caching_show_tables', fetch_result=True) -%}
    show tables in {{ schema_relation.schema }} like '*'
  {% endcall %}
  {%- set rows = [] -%}
  {%- for row in load_result('list_relations_without_caching_show_tables').table -%}
    {%- do rows.append([row[0], row[1], row[2]]) -%}
  {%- endfor -%}
  {% call statement('cdc_list_views', fetch_result=True) -%}
    show views in {{ schema_relation.schema }} like '*'
  {% endcall %}
  {%- for row in load_result('cdc_list_views').table if not row[2] -%}
    {%- do rows.append([row[0], row[1], row[2]]) -%}
  {%- endfor -%}
  {% do return(rows) %}
{% endmacro %}

{#- DESCRIBE EXTENDED of an Iceberg view has no `Type: VIEW` line, the one dbt-spark reads the
    relation type from (a view taken for a table would be dropped with DROP TABLE): add it.
    dbt-spark unpacks each row as (name, value, comment). -#}
{% macro describe_with_view_type(table_name) %}
  {% call statement('describe_table_extended_without_caching', fetch_result=True) -%}
    describe extended {{ table_name }}
  {% endcall %}
  {%- set rows = [] -%}
  {%- for row in load_result('describe_table_extended_without_caching').table -%}
    {%- do rows.append([row[0], row[1], row[2]]) -%}
  {%- endfor -%}
  {%- if rows | selectattr(0, 'equalto', '# Detailed View Information') | list -%}
    {%- do rows.append(['Type', 'VIEW', '']) -%}
  {%- endif -%}
  {% do return(rows) %}
{% endmacro %}
