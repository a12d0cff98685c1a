{#- What every adapter wrapper needs: the apply statements for this model's run. -#}

{% macro model_apply_statements(target, source) %}
  {%- do cdc.create_state_tables() -%}
  {%- set columns = adapter.get_columns_in_relation(target) -%}
  {{ return(cdc.apply_statements(target, source, columns, cdc.apply_keys(), cdc.apply_entity(), cdc.target_name())) }}
{% endmacro %}

{#- First run or --full-refresh: forget this target's markers and tombstones, create the
    table empty, then apply every staged File. Runs the preparation now; returns the apply. -#}
{% macro create_then_apply_statements(relation, sql, create_table_sql) %}
  {%- do cdc.create_state_tables() -%}
  {%- for stmt in cdc.reset_statements(cdc.target_name()) -%}
    {%- do run_query(stmt) -%}
  {%- endfor -%}
  {%- do run_query(create_table_sql) -%}
  {{ return(cdc.model_apply_statements(relation, '(' ~ sql ~ ')')) }}
{% endmacro %}

{#- Spark destinations execute one statement per call: run all but the last, return the last
    for the materialization's `main` statement. Order is the guarantee here (no transaction). -#}
{% macro run_all_but_last(statements) %}
  {%- for stmt in statements[:-1] -%}
    {%- do run_query(stmt) -%}
  {%- endfor -%}
  {{ return(statements[-1]) }}
{% endmacro %}

{#- Spark and Databricks: the apply statements, then the scratch table's drop, run in order;
    returns the last for `main`. `create_sql` set: the first-run path (create, then apply). -#}
{% macro spark_family_apply(target, source, create_sql=none) %}
  {%- if create_sql is none -%}
    {%- set statements = cdc.model_apply_statements(target, source) -%}
  {%- else -%}
    {%- set statements = cdc.create_then_apply_statements(target, source, create_sql) -%}
  {%- endif -%}
  {%- do statements.append('drop table if exists ' ~ cdc.scratch_relation(target, 'batch')) -%}
  {{ return(cdc.run_all_but_last(statements)) }}
{% endmacro %}
