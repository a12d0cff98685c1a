{#-
  What an entity model (dbt_project/models/<entity>.sql) calls:

    select <your columns>, {{ cdc.lineage_select() }}
    from {{ cdc.unapplied(ref('stg_customers')) }}

  `unapplied` reads the staged rows of Files that have no Applied File Marker for this model
  yet; using it is also what makes the model an apply model (see is_apply_model below).
-#}

{% macro unapplied(relation) %}
  {%- set markers = cdc.state_relation('applied_files') -%}
  {%- set files = cdc.state_relation('staged_files') -%}     {#- declared inputs: lineage -#}
  {%- set tombstones = cdc.state_relation('tombstones') -%}
  {%- set lin = cdc.lineage_columns() -%}
  (
    select cdc_staged.*
    from {{ relation }} as cdc_staged
    where cdc_staged.{{ lin.file_hash }} not in (
      select cdc_markers.file_hash
      from {{ markers }} as cdc_markers
      where cdc_markers.target_table = {{ cdc.sql_string(cdc.target_name()) }}
    )
  ) as cdc_unapplied
{%- endmacro %}

{#- The staged lineage columns an apply model must pass through, in their fixed order. -#}
{% macro lineage_select(relation_alias=none) %}
  {%- set lin = cdc.lineage_columns() -%}
  {%- set names = [lin.operation, lin.sequence, lin.process_id, lin.file_hash, lin.file_name,
                   lin.row_number, lin.ingested_at] -%}
  {%- for n in names -%}
    {{ (relation_alias ~ '.') if relation_alias }}{{ n }}{{ ',\n    ' if not loop.last }}
  {%- endfor -%}
{%- endmacro %}

{#- The name markers and tombstones use for this model's table: schema.identifier. -#}
{% macro target_name() %}
  {{ return((this.schema ~ '.' ~ this.identifier) | lower) }}
{% endmacro %}

{#- An incremental model that reads through cdc.unapplied(). -#}
{% macro is_apply_model() %}
  {%- if model.resource_type != 'model' or config.get('materialized') != 'incremental' -%}
    {{ return(false) }}
  {%- endif -%}
  {{ return(['cdc_state', 'applied_files'] in (model.sources or [])) }}
{% endmacro %}

{#- The entity an apply model reads: the one upstream source whose meta declares `cdc`
    (directly, or through staging models). -#}
{% macro apply_entity() %}
  {%- set found = [] -%}
  {%- set queue = model.depends_on.nodes | list -%}
  {#- Breadth-first over the upstream graph; the list grows while it is walked. -#}
  {%- for uid in queue -%}
    {%- if uid.startswith('source.') -%}
      {%- set node = graph.sources.get(uid) -%}
      {%- if node and ((node.meta or {}).get('cdc') or (node.config.meta or {}).get('cdc')) and node.name not in found -%}
        {%- do found.append(node.name) -%}
      {%- endif -%}
    {%- elif uid in graph.nodes and queue | length < 200 -%}
      {%- for parent in graph.nodes[uid].depends_on.nodes if parent not in queue -%}
        {%- do queue.append(parent) -%}
      {%- endfor -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if found | length != 1 -%}
    {{ exceptions.raise_compiler_error(
        "model " ~ model.name ~ " must read exactly one CDC entity (a source with meta.cdc) "
        ~ "through cdc.unapplied(); found: " ~ (found | join(', ') or 'none')) }}
  {%- endif -%}
  {{ return(cdc.plain_identifier(found[0], "the entity name of model " ~ model.name)) }}
{% endmacro %}

{#- unique_key as a list; an apply model must have one. -#}
{% macro apply_keys() %}
  {%- set key = config.get('unique_key') -%}
  {%- if not key -%}
    {{ exceptions.raise_compiler_error(
        "model " ~ model.name ~ ": an apply model needs unique_key (the entity's key columns)") }}
  {%- endif -%}
  {{ return([key] if key is string else key) }}
{% endmacro %}
