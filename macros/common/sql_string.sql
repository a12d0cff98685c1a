{#- A value as a SQL string literal, escaped for the adapter's dialect. Every literal the package
    renders into SQL goes through here: names come from declarations and profiles, ids from
    the command line. -#}
{% macro sql_string(value) %}
  {{ return(adapter.dispatch('sql_string', 'cdc')(value)) }}
{% endmacro %}

{#- Standard SQL (PostgreSQL with standard_conforming_strings): double the quote. -#}
{% macro default__sql_string(value) %}
  {{ return("'" ~ (value | string | replace("'", "''")) ~ "'") }}
{% endmacro %}

{#- Spark, Databricks and BigQuery read backslash escapes inside literals. -#}
{% macro spark__sql_string(value) %}
  {{ return("'" ~ (value | string | replace("\\", "\\\\") | replace("'", "\\'")) ~ "'") }}
{% endmacro %}
{% macro bigquery__sql_string(value) %}
  {{ return(cdc.spark__sql_string(value)) }}
{% endmacro %}

{#- A name from a declaration must be a plain identifier before it reaches SQL. -#}
{% macro plain_identifier(value, what) %}
  {%- if value is not string or not modules.re.fullmatch('[A-Za-z_][A-Za-z0-9_]{0,62}', value) -%}
    {{ exceptions.raise_compiler_error(
        what ~ " must be a plain identifier (letters, digits, underscore; not starting with a "
        ~ "digit; at most 63 characters), got \"" ~ value ~ "\"") }}
  {%- endif -%}
  {{ return(value) }}
{% endmacro %}

{#- The time of a DMS change from its AR_H_CHANGE_SEQ (the first 14 digits: yyyyMMddHHmmss), as a
    timestamp: a history model's valid_from when the source's rows carry no commit time.
    `column`: a column reference or expression, as SQL (unquoted names fold as the destination
    folds them). -#}
{% macro dms_change_time(column) %}
  {{ return(adapter.dispatch('dms_change_time', 'cdc')(column)) }}
{% endmacro %}
{% macro default__dms_change_time(column) -%}
  cast(to_timestamp(substr({{ column }}, 1, 14), 'yyyyMMddHHmmss') as timestamp)
{%- endmacro %}
{% macro postgres__dms_change_time(column) -%}
  cast(to_timestamp(substr({{ column }}, 1, 14), 'YYYYMMDDHH24MISS') as timestamp)
{%- endmacro %}
{% macro bigquery__dms_change_time(column) -%}
  parse_timestamp('%Y%m%d%H%M%S', substr({{ column }}, 1, 14))
{%- endmacro %}
