{#-
  What an entity model (dbt_project/models/<entity>.sql) calls:

    select <your columns>, {{ cdc.lineage_select() }}
    from {{ cdc.unapplied(ref('stg_customers')) }}

  `unapplied` reads the staged rows of Files that have no Applied File Marker for this model
  yet. The model declares itself an apply model in its config (see is_apply_model below).
-#}

{% macro unapplied(relation, transactions=none) %}
  {%- if execute -%}{%- do cdc._check_apply_model('cdc.unapplied()') -%}{%- endif -%}
  {#- A member of a transaction group: only rows of released transactions (transactions.sql). -#}
  {%- set gated = execute and transactions is not none -%}
  {%- if execute and transactions is none -%}{%- do cdc.model_ledger(cdc.apply_entity()) -%}{%- endif -%}
  {#- --full-refresh: checked as the model compiles, before a materialization drops the table -#}
  {%- if execute and should_full_refresh() -%}{%- do cdc.check_rebuild_complete(cdc.apply_entity()) -%}{%- endif -%}
  {%- set markers = cdc.state_relation('applied_files') -%}
  {%- set files = cdc.state_relation('staged_files') -%}     {#- declared inputs: lineage -#}
  {%- set tombstones = cdc.state_relation('tombstones') -%}
  {%- set q = adapter.quote -%}
  (
    select cdc_staged.*
    from {{ relation }} as cdc_staged
    {%- if gated %}
    {{ cdc.released_joins('cdc_staged', cdc.apply_entity(), transactions) }}
    {%- endif %}
    where cdc_staged.{{ q(cdc.lineage_columns().file_hash) }} not in (
      select cdc_markers.{{ q('file_hash') }}
      from {{ markers }} as cdc_markers
      where cdc_markers.{{ q('target_table') }} = {{ cdc.sql_string(cdc.target_name()) }}
    )
    {%- if gated %}
      and {{ cdc.released_filter('cdc_staged', cdc.apply_entity()) }}
    {%- endif %}
  ) as cdc_unapplied
{%- endmacro %}

{#- The staged lineage columns an apply model must pass through, in the contract's order. -#}
{% macro lineage_select(relation_alias=none) %}
  {%- set mode = cdc.entity_settings(cdc.apply_entity()).get('mode', 'cdc') if execute else 'cdc' -%}
  {%- for col in cdc.lineage_on('staged', mode) -%}
    {{ (relation_alias ~ '.') if relation_alias }}{{ adapter.quote(col.name) }}{{ ',\n    ' if not loop.last }}
  {%- endfor -%}
{%- endmacro %}

{#- The name markers and tombstones use for this model's table: schema.identifier. -#}
{% macro target_name() %}
  {{ return((this.schema ~ '.' ~ this.identifier) | lower) }}
{% endmacro %}

{#- A model is an apply model when it says so in its config:
      config:
        meta:
          cdc: {apply: true}
    (under meta, where dbt 1.10+ wants custom keys). Only then are its merge and first-run
    create replaced by the apply; any other model, an incremental report over the markers
    included, gets dbt's own macros. -#}
{% macro is_apply_model() %}
  {%- if model.resource_type != 'model' -%}{{ return(false) }}{%- endif -%}
  {%- set declared = cdc._declared_apply() -%}
  {%- if declared -%}{%- do cdc._check_apply_model('the apply') -%}{%- endif -%}
  {{ return(declared) }}
{% endmacro %}

{#- meta.cdc.apply of this model, which must be a boolean when it is there. -#}
{% macro _declared_apply() %}
  {%- set declared = ((config.get('meta') or {}).get('cdc') or {}).get('apply', false) -%}
  {%- if declared is not sameas true and declared is not sameas false -%}
    {{ exceptions.raise_compiler_error("model " ~ model.name ~ ": meta.cdc.apply must be true or false, got " ~ declared) }}
  {%- endif -%}
  {{ return(declared) }}
{% endmacro %}

{#- A history apply model keeps every version of each key instead of the current row:
      config:
        meta:
          cdc: {apply: true, history: true}
    Its rows carry the contract's "history" columns (valid_from, valid_to, closed_process_id).
    Of a snapshot entity: a version per extract that changed the key (macros/apply/snapshot.sql);
    of a change entity: a version per change (macros/apply/history.sql). -#}
{% macro is_history_model() %}
  {%- if model is not defined or model.resource_type != 'model' -%}{{ return(false) }}{%- endif -%}
  {%- set declared = ((config.get('meta') or {}).get('cdc') or {}).get('history', false) -%}
  {%- if declared is not sameas true and declared is not sameas false -%}
    {{ exceptions.raise_compiler_error("model " ~ model.name ~ ": meta.cdc.history must be true or false, got " ~ declared) }}
  {%- endif -%}
  {{ return(declared) }}
{% endmacro %}

{#- What an apply model needs, checked before any SQL runs: a clear compiler error instead of
    a merge dbt would otherwise run as a plain upsert (or append) of staged rows. -#}
{% macro _check_apply_model(where) %}
  {%- set name = model.name -%}
  {%- set declared = cdc._declared_apply() -%}
  {%- set how = "declare it with config: {meta: {cdc: {apply: true}}, materialized: incremental, "
      ~ "incremental_strategy: merge, unique_key: <the entity's key>} and select from "
      ~ "cdc.unapplied(ref('stg_<entity>'))" -%}
  {%- if declared is not sameas true -%}
    {{ exceptions.raise_compiler_error("model " ~ name ~ " uses " ~ where ~ " but is not an apply model: " ~ how) }}
  {%- endif -%}
  {%- if config.get('materialized') != 'incremental' -%}
    {{ exceptions.raise_compiler_error("apply model " ~ name ~ " must be materialized incremental, not "
        ~ config.get('materialized') ~ ": " ~ how) }}
  {%- endif -%}
  {%- if config.get('incremental_strategy') != 'merge' -%}
    {{ exceptions.raise_compiler_error("apply model " ~ name ~ " needs incremental_strategy: merge (got "
        ~ (config.get('incremental_strategy') or 'the adapter default') ~ "): " ~ how) }}
  {%- endif -%}
  {%- if not config.get('unique_key') -%}
    {{ exceptions.raise_compiler_error("apply model " ~ name ~ " needs unique_key (the entity's key columns): " ~ how) }}
  {%- endif -%}
  {%- if ['cdc_state', 'applied_files'] not in (model.sources or []) -%}
    {{ exceptions.raise_compiler_error("apply model " ~ name ~ " must select from cdc.unapplied(ref(...)): " ~ how) }}
  {%- endif -%}
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
    {%- elif uid in graph.nodes and ((graph.nodes[uid].config.meta or {}).get('cdc') or {}).get('transaction_ledger') -%}
      {#- a transaction group's ledger: read for the gate, not an entity of this model -#}
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
  {{ return([key] if key is string else key) }}
{% endmacro %}

{#- The meta.cdc settings of the entity (a source table) named `name`: mode, snapshot_kind, ... -#}
{% macro entity_settings(name) %}
  {%- for node in graph.sources.values() if node.name == name -%}
    {%- set meta = (node.meta or {}).get('cdc') or (node.config.meta or {}).get('cdc') -%}
    {%- if meta -%}{{ return(meta) }}{%- endif -%}
  {%- endfor -%}
  {{ return({}) }}
{% endmacro %}

{#- A change entity's partial updates and truncates, from its meta.cdc (the runner validates
    the same keys: runner/entities.py):
      null_means: unchanged  an update's NULL keeps the key's previous value, in
                             unchanged_columns (default: every declared column but the keys,
                             the sequence and the operation column);
      operation values       one of them may map to T: a truncate of the whole table;
      reloads                a DMS reload is staged as a truncate before its rows.
    Returns {unchanged: [lower-cased column names], truncates: bool}. -#}
{% macro change_settings(name) %}
  {%- set meta = cdc.entity_settings(name) -%}
  {%- set unchanged = [] -%}
  {%- if meta.get('null_means', 'value') == 'unchanged' -%}
    {%- set op = meta.get('operation') or {} -%}
    {%- set sequence = meta.get('sequence') -%}
    {%- set sequence = (sequence.get('column') or '') if sequence is mapping else (sequence or '') -%}
    {%- set fixed = (meta.get('keys') if meta.get('keys') is not string else [meta.get('keys')]) + [sequence, op.get('column', 'Op')] -%}
    {%- set fixed = fixed | map('lower') | list -%}
    {%- set listed = meta.get('unchanged_columns') -%}
    {%- if listed is none -%}
      {%- for node in graph.sources.values() if node.name == name -%}
        {%- set listed = node.columns.keys() | list -%}
        {%- for c in listed if c | lower not in fixed -%}{%- do unchanged.append(c | lower) -%}{%- endfor -%}
      {%- endfor -%}
    {%- else -%}
      {%- for c in listed if c | lower not in fixed -%}{%- do unchanged.append(c | lower) -%}{%- endfor -%}
    {%- endif -%}
  {%- endif -%}
  {%- set op = meta.get('operation') or {} -%}
  {%- if op.get('values') -%}
    {%- set truncates = 'T' in (op.get('values').values() | map('string') | map('upper') | list) -%}
  {%- else -%}
    {%- set truncates = (op.get('preset', 'dms') | lower) == 'debezium' -%}
  {%- endif -%}
  {#- meta.cdc.reloads: a DMS reload is staged with a truncate just before its rows. -#}
  {%- set truncates = truncates or meta.get('reloads') not in [none, false] -%}
  {{ return({'unchanged': unchanged, 'truncates': truncates}) }}
{% endmacro %}

{#- The history settings of this model (meta.cdc beside history: true), validated:
      valid_from: a column of the model: each version's validity starts at its value (the
                  change's time at the source; a change entity only). Default: the sequence
                  (a snapshot entity: the extract's effective date).
      hard_deletes: invalidate (default: a delete closes the open version) or new_record (it
                  also adds a deletion record, operation D, open until the key comes back).
      snapshot_meta_column_names: {dbt_valid_from, dbt_valid_to, closed_process_id}: names
                  of the history columns, like dbt's snapshot config (default: the contract's).
      dbt_valid_to_current: a SQL expression for the open versions' valid_to, like dbt's
                  (default NULL).
    Returns {valid_from, hard_deletes, names: {valid_from, valid_to, closed_process_id},
    valid_to_current}. -#}
{% macro history_settings() %}
  {%- set meta = (config.get('meta') or {}).get('cdc') or {} -%}
  {%- set lin = cdc.lineage_columns() -%}
  {%- set where = "model " ~ model.name ~ ": meta.cdc." -%}
  {%- set hard_deletes = meta.get('hard_deletes', 'invalidate') -%}
  {%- if hard_deletes not in ['invalidate', 'new_record'] -%}
    {{ exceptions.raise_compiler_error(where ~ "hard_deletes must be invalidate or new_record, got " ~ hard_deletes) }}
  {%- endif -%}
  {%- set given = meta.get('snapshot_meta_column_names') or {} -%}
  {%- set known = {'dbt_valid_from': 'valid_from', 'dbt_valid_to': 'valid_to', 'closed_process_id': 'closed_process_id'} -%}
  {%- set names = {'valid_from': lin.valid_from, 'valid_to': lin.valid_to, 'closed_process_id': lin.closed_process_id} -%}
  {%- for k, v in given.items() -%}
    {%- if k not in known -%}
      {{ exceptions.raise_compiler_error(where ~ "snapshot_meta_column_names knows " ~ (known.keys() | join(', ')) ~ ", not " ~ k) }}
    {%- endif -%}
    {%- do names.update({known[k]: cdc.plain_identifier(v, where ~ "snapshot_meta_column_names." ~ k)}) -%}
  {%- endfor -%}
  {%- set valid_from = meta.get('valid_from') -%}
  {%- if valid_from is not none -%}
    {%- set valid_from = cdc.plain_identifier(valid_from, where ~ "valid_from") -%}
  {%- endif -%}
  {{ return({
      'valid_from': valid_from,
      'hard_deletes': hard_deletes,
      'names': names,
      'valid_to_current': meta.get('dbt_valid_to_current'),
  }) }}
{% endmacro %}

{#- The entity's columns as an apply model selects them, from its staging relation: every column
    but the operation and sequence columns and the lineage columns (lineage_select() adds those),
    and but `except`. A column a File added to the staging table (meta.cdc.on_schema_change:
    append_new_columns) is selected by the next build, and the model's table gains it:
      select {{ cdc.entity_columns(ref('stg_customers')) }}, {{ cdc.lineage_select() }}
      from {{ cdc.unapplied(ref('stg_customers')) }} -#}
{% macro entity_columns(relation, except=[]) %}
  {%- if not execute -%}{{ return('*') }}{%- endif -%}
  {%- set meta = cdc.entity_settings(cdc.apply_entity()) -%}
  {%- set skip = [] -%}
  {%- for name in except -%}{%- do skip.append(name | lower) -%}{%- endfor -%}
  {%- set op = meta.get('operation') -%}
  {%- do skip.append(((op.get('column') if op is mapping else op) or '') | lower) -%}
  {%- set seq = meta.get('sequence') -%}
  {%- do skip.append(((seq.get('column') if seq is mapping else seq) or '') | lower) -%}
  {%- for mode in ['cdc', 'snapshot'] -%}
    {%- for col in cdc.lineage_on('staged', mode) -%}{%- do skip.append(col.name | lower) -%}{%- endfor -%}
  {%- endfor -%}
  {%- set names = [] -%}
  {%- for col in adapter.get_columns_in_relation(relation) if col.name | lower not in skip -%}
    {%- do names.append(adapter.quote(col.name)) -%}
  {%- endfor -%}
  {{ return(names | join(',\n    ')) }}
{% endmacro %}
