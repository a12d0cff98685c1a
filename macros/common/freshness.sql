{#- `dbt source freshness` for CDC sources: when the entity's last File was staged (the
    staged-files manifest `runner ingest` writes after a File's rows). A source declares it with
    `config: {loaded_at_query: "{{ cdc.last_staged_at() }}"}` and its `freshness`; dbt renders
    it when freshness runs, with `source_node` the entity's source table. An entity with no
    File staged yet has no time: dbt reports it as an error. -#}
{% macro last_staged_at() %}
  {%- set q = adapter.quote -%}
  {%- set entity = source_node.name if source_node is defined else model.name -%}
  select max(cdc_files.{{ q('staged_at') }})
  from {{ cdc.state_relation('staged_files') }} as cdc_files
  where cdc_files.{{ q('entity') }} = {{ cdc.sql_string(entity) }}
{%- endmacro %}
