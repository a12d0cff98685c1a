{#- dbt-spark lists the relations of a schema on an Iceberg catalog with SHOW TABLES (SHOW TABLE
    EXTENDED is refused for v2 tables), which names tables only: Iceberg views are missing from
    dbt's relation cache and from `dbt docs generate`'s catalog. This adds SHOW VIEWS (the
    persistent ones: a session's temporary views belong to no schema). dbt-spark unpacks each
    row as (schema, name, is_temporary), then describes each relation itself.
    dbt calls this macro by its bare name, which only the root project can override:
    dbt_project/macros/catalog.sql forwards to it. Rows are returned as plain lists (an agate
    merge fails when one side is empty and its column types differ). -#}
{% macro show_tables_and_views(schema_relation, mark_views=false) %}
  {% call statement('list_relations_without_caching_show_tables', fetch_result=True) -%}
    show tables in {{ schema_relation.schema }} like '*'
  {% endcall %}
  {%- set rows = [] -%}
  {%- for row in load_result('list_relations_without_caching_show_tables').table -%}
    {%- do rows.append([row[0], row[1], row[2]] + ([false] if mark_views else [])) -%}
  {%- endfor -%}
  {% call statement('cdc_list_views', fetch_result=True) -%}
    show views in {{ schema_relation.schema }} like '*'
  {% endcall %}
  {%- for row in load_result('cdc_list_views').table if not row[2] -%}
    {%- do rows.append([row[0], row[1], row[2]] + ([true] if mark_views else [])) -%}
  {%- endfor -%}
  {% do return(rows) %}
{% endmacro %}

{#- dbt's relation cache on Spark, filled when a build starts: dbt-spark asks SHOW TABLE EXTENDED,
    which Iceberg refuses, then lists the schema and runs a DESCRIBE EXTENDED per relation, of
    which a build reads only whether each is a view and its provider (and a view's
    fingerprint, in its properties). Where the session catalog is Iceberg's SparkCatalog every
    table in it is an Iceberg table: tables are listed as such without a DESCRIBE each, views
    are described as before, and `dbt docs generate` (which shows each table's owner) describes
    everything. Elsewhere dbt-spark's own statement. Rows as dbt-spark reads SHOW TABLE
    EXTENDED's: (schema, name, is_temporary, information). -#}
{% macro spark_list_relations(schema_relation) %}
  {%- set catalog = run_query('set spark.sql.catalog.spark_catalog').rows -%}
  {%- set iceberg = catalog and (catalog[0][1] | string) == 'org.apache.iceberg.spark.SparkCatalog' -%}
  {%- if not iceberg -%}
    {% call statement('list_relations_without_caching', fetch_result=True) -%}
      show table extended in {{ schema_relation.schema }} like '*'
    {% endcall %}
    {% do return(load_result('list_relations_without_caching').table) %}
  {%- endif -%}
  {%- set describe_all = flags.WHICH == 'generate' -%}
  {%- set rows = [] -%}
  {#- (schema, name, is_temporary, is_view) -#}
  {%- for row in cdc.show_tables_and_views(schema_relation, mark_views=true) -%}
    {%- if row[2] -%}
      {%- do rows.append([row[0], row[1], row[2], '']) -%}
    {%- elif row[3] or describe_all -%}
      {%- set information = [] -%}
      {%- for info in cdc.describe_with_view_type(row[0] ~ '.' ~ row[1]) if not info[0].startswith('#') -%}
        {%- do information.append(info[0] ~ ': ' ~ info[1] ~ '\n') -%}
      {%- endfor -%}
      {%- do rows.append([row[0], row[1], row[2], information | join('')]) -%}
    {%- else -%}
      {%- do rows.append([row[0], row[1], row[2], 'Type: MANAGED\nProvider: iceberg\n']) -%}
    {%- endif -%}
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

{#- Views on Spark (dbt-spark's view materialization, wrapped): a view that would come out the
    same is left as it is. What would come out is the statement dbt-spark runs (the model's
    SQL, its description, documented columns, contract) and the columns the SQL gives now
    (`describe query`: a `select *` over a table that gained a column gives a new view); its
    fingerprint is kept in the view's properties (`cdc.fingerprint`), and the view's
    description in dbt's relation cache (DESCRIBE EXTENDED, read when the build starts) says
    what is there now. Anything else (no view yet, no fingerprint, a table of that name,
    --full-refresh) goes through dbt-spark's own. dbt uses a package's materialization only
    when the root project forwards to it (dbt_project/macros/materializations.sql). -#}
{% macro materialization_view_spark() %}
  {%- set old_relation = adapter.get_relation(database=database, schema=schema, identifier=model['alias']) -%}
  {%- set target_relation = api.Relation.create(identifier=model['alias'], schema=schema, database=database, type='view') -%}
  {%- set fingerprint = cdc.spark_view_fingerprint(target_relation, sql) -%}
  {%- if old_relation is not none and old_relation.is_view and not should_full_refresh()
        and cdc.spark_view_fingerprint_of(old_relation) == fingerprint -%}
    {{ run_hooks(pre_hooks) }}
    {% call statement('main') -%}
      select 'view unchanged' as status
    {%- endcall %}
    {%- do apply_grants(target_relation, config.get('grants'), should_revoke=True) -%}
    {{ run_hooks(post_hooks) }}
    {{ return({'relations': [target_relation]}) }}
  {%- endif -%}
  {%- set result = create_or_replace_view() -%}
  {%- do run_query('alter view ' ~ target_relation ~ " set tblproperties ('cdc.fingerprint' = '" ~ fingerprint ~ "')") -%}
  {{ return(result) }}
{% endmacro %}

{#- The fingerprint of the view `sql` would make: its create statement and its columns now. -#}
{% macro spark_view_fingerprint(relation, sql) %}
  {%- set columns = [] -%}
  {%- for row in run_query('describe query ' ~ sql) -%}
    {%- do columns.append(row[0] ~ ' ' ~ row[1]) -%}
  {%- endfor -%}
  {{ return(local_md5(get_create_view_as_sql(relation, sql) ~ '\n' ~ columns | join('\n'))) }}
{% endmacro %}

{#- The fingerprint a view was made with, from its description in dbt's relation cache
    (`View Properties: ['cdc.fingerprint' = '…', …]` for an Iceberg view,
    `Table Properties: [cdc.fingerprint=…, …]` for a session catalog's), or none. -#}
{% macro spark_view_fingerprint_of(relation) %}
  {%- set found = modules.re.search("cdc\\.fingerprint'?\\s*=\\s*'?([0-9a-f]{32})", relation.information or '') -%}
  {{ return(found.group(1) if found else none) }}
{% endmacro %}
