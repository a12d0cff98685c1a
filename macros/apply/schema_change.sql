{#-
  An apply model's table follows its SQL's columns (dbt's on_schema_change, in dbt's own words):
  a column the model now selects is added to the table (older rows NULL), and a column whose
  type widened in place (a larger integer, more decimal digits at the same scale, a longer
  varchar) is altered to the new type. This is what an apply model does with on_schema_change
  unset or append_new_columns (dbt's append_new_columns, plus the widening, which loses no
  value); with fail, ignore or sync_all_columns dbt's own behaviour applies. Other models are
  left to dbt.

  The staging side (a File's new column, meta.cdc.on_schema_change) is the runner's:
  runner/staging/schema.py.
-#}

{% macro default__process_schema_changes(on_schema_change, source_relation, target_relation) %}
  {#- dbt fills on_schema_change with `ignore` when nothing sets it: what the user set is in
      the node's unrendered config (the model's config(), its YAML or dbt_project.yml). -#}
  {%- set declared = (model.unrendered_config or {}).get('on_schema_change') -%}
  {%- if not cdc.is_apply_model() or declared not in (none, 'append_new_columns') -%}
    {{ return(cdc.adapter_process_schema_changes(on_schema_change, source_relation, target_relation)) }}
  {%- endif -%}
  {%- set changes = check_for_schema_changes(source_relation, target_relation) -%}
  {%- if changes['source_not_in_target'] -%}
    {%- do alter_relation_add_remove_columns(target_relation, changes['source_not_in_target'], none) -%}
    {%- if target.type == 'bigquery' -%}
      {#- dbt-bigquery adds columns with a schema update; the BigQuery emulator applies that to
          its metadata only. The same columns added by DDL (a no-op on BigQuery) reach its
          storage too. -#}
      {%- for col in changes['source_not_in_target'] -%}
        {%- do run_query('alter table ' ~ target_relation ~ ' add column if not exists '
            ~ adapter.quote(col.name) ~ ' ' ~ col.data_type) -%}
      {%- endfor -%}
    {%- endif -%}
    {%- do log("cdc: " ~ target_relation ~ ": columns added (older rows NULL): "
        ~ (changes['source_not_in_target'] | map(attribute='name') | join(', ')), info=true) -%}
  {%- endif -%}
  {%- set old_types = {} -%}
  {%- for col in changes['target_columns'] -%}
    {%- do old_types.update({col.name | lower: col.data_type}) -%}
  {%- endfor -%}
  {%- for ntt in changes['new_target_types'] -%}
    {%- set old = old_types.get(ntt['column_name'] | lower) -%}
    {%- if old and cdc.is_widening(old, ntt['new_type']) -%}
      {%- do run_query(cdc.widen_column_sql(target_relation, ntt['column_name'], ntt['new_type'])) -%}
      {%- do log("cdc: " ~ target_relation ~ ": column " ~ ntt['column_name'] ~ " widened from "
          ~ old ~ " to " ~ ntt['new_type'], info=true) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(changes['source_columns']) }}
{% endmacro %}

{#- The adapter's own process_schema_changes (the cdc package's dispatch entry comes first). -#}
{% macro adapter_process_schema_changes(on_schema_change, source_relation, target_relation) %}
  {%- if target.type == 'bigquery' -%}
    {{ return(dbt.bigquery__process_schema_changes(on_schema_change, source_relation, target_relation)) }}
  {%- endif -%}
  {{ return(dbt.default__process_schema_changes(on_schema_change, source_relation, target_relation)) }}
{% endmacro %}

{#- Whether a column of type `old` can become `new` in place, every value kept. Spellings of
    Spark, PostgreSQL and BigQuery: tinyint < smallint < int < bigint, float < double,
    decimal(p,s) < decimal(p+n,s), varchar(n) < varchar(n+m) < string/text. -#}
{% macro is_widening(old, new) %}
  {%- set a = cdc._type_parts(old) -%}
  {%- set b = cdc._type_parts(new) -%}
  {%- set ints = {'tinyint': 1, 'smallint': 2, 'int2': 2, 'int': 3, 'integer': 3, 'int4': 3,
                  'bigint': 4, 'int8': 4} -%}
  {%- set floats = {'float': 1, 'real': 1, 'float4': 1, 'double': 2, 'double precision': 2, 'float8': 2} -%}
  {%- if a.name in ints and b.name in ints -%}{{ return(ints[b.name] > ints[a.name]) }}{%- endif -%}
  {%- if a.name in floats and b.name in floats -%}{{ return(floats[b.name] > floats[a.name]) }}{%- endif -%}
  {%- if a.name in ('decimal', 'numeric', 'bignumeric') and b.name in ('decimal', 'numeric', 'bignumeric') -%}
    {%- if a.args | length == 2 and b.args | length == 2 -%}
      {{ return(a.args[1] == b.args[1] and b.args[0] > a.args[0]) }}
    {%- endif -%}
    {{ return(false) }}
  {%- endif -%}
  {%- set texts = ('varchar', 'character varying', 'char', 'character') -%}
  {%- if a.name in texts and b.name in ('string', 'text') -%}{{ return(true) }}{%- endif -%}
  {%- if a.name in texts and b.name in texts and a.args and b.args -%}
    {{ return(b.args[0] >= a.args[0] and b.name not in ('char', 'character')) }}
  {%- endif -%}
  {{ return(false) }}
{% endmacro %}

{#- A type's name (lower case) and its integer arguments: numeric(12,2) -> numeric, [12, 2]. -#}
{% macro _type_parts(data_type) %}
  {%- set text = data_type | lower | trim -%}
  {%- set name = text.split('(')[0] | trim -%}
  {%- set args = [] -%}
  {%- if '(' in text -%}
    {%- for part in text.split('(')[1].rstrip(')').split(',') -%}
      {%- do args.append(part | trim | int) -%}
    {%- endfor -%}
  {%- endif -%}
  {{ return({'name': name, 'args': args}) }}
{% endmacro %}

{#- The statement that widens one column of a table in place. -#}
{% macro widen_column_sql(relation, column_name, new_type) %}
  {{ return(adapter.dispatch('widen_column_sql', 'cdc')(relation, column_name, new_type)) }}
{% endmacro %}

{% macro default__widen_column_sql(relation, column_name, new_type) %}
  {{ return('alter table ' ~ relation ~ ' alter column ' ~ adapter.quote(column_name) ~ ' type ' ~ new_type) }}
{% endmacro %}

{% macro bigquery__widen_column_sql(relation, column_name, new_type) %}
  {{ return('alter table ' ~ relation ~ ' alter column ' ~ adapter.quote(column_name) ~ ' set data type ' ~ new_type) }}
{% endmacro %}

{#- A snapshot's table follows its source's widened types the same way (dbt widens only
    strings there): called by the cdc package's snapshot merge macros, before the merge. -#}
{% macro widen_columns(target_relation, source_relation) %}
  {#- only as a snapshot runs (a snapshot merge rendered elsewhere reads no table) -#}
  {%- if not execute or model is not defined or model.resource_type != 'snapshot' -%}{{ return(none) }}{%- endif -%}
  {%- set old_types = {} -%}
  {%- for col in adapter.get_columns_in_relation(target_relation) -%}
    {%- do old_types.update({col.name | lower: col.data_type}) -%}
  {%- endfor -%}
  {%- for col in adapter.get_columns_in_relation(source_relation) -%}
    {%- set old = old_types.get(col.name | lower) -%}
    {%- if old and old | lower != col.data_type | lower and cdc.is_widening(old, col.data_type) -%}
      {%- do run_query(cdc.widen_column_sql(target_relation, col.name, col.data_type)) -%}
      {%- do log("cdc: " ~ target_relation ~ ": column " ~ col.name ~ " widened from "
          ~ old ~ " to " ~ col.data_type, info=true) -%}
    {%- endif -%}
  {%- endfor -%}
{% endmacro %}
