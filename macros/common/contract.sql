{#-
  The contract between the runner (Python) and this package (SQL): the framework's reserved
  columns and its own tables, written once, here. The runner renders this very macro from its
  installed copy of the package (runner/contract.py), so the two can never disagree; every DDL,
  insert and select of these columns, on every destination, is generated from it.

  lineage: the `_cdc_` columns, in order. The key is the value's name:
    on "staged":   filled by `runner ingest` on every staged row (from the value of that name:
                   operation, sequence, process_id, file_hash, file_name, file_path, row_number,
                   ingested_at), passed through by the apply model (cdc.lineage_select());
    on "applied":  filled by the apply on target rows (invocation_id, applied_at);
    on "snapshot": filled by the history snapshots that ask for process ids;
    on "history":  filled by the apply on the rows of a history apply model (meta.cdc.history):
                   each row is one version, valid from its sequence (valid_from) until the
                   next version's or the delete's (valid_to, NULL while current), with the
                   process id that closed it (closed_process_id).
    Types: string, bigint, timestamp, date, or "sequence" (the entity's declared sequence
    type; for a snapshot entity, date: the File's effective date). "modes" (optional, default
    all): the entity modes whose rows carry the column (cdc, snapshot); the key and row hashes
    are on snapshot rows only (runner/staging/row_hash.py documents them).
    Adding a column is one entry here; append, never reorder or rename.
  state_tables: the framework's tables, in the one state schema (cdc.state_schema()): columns
    in order with their types, and the key each row is unique by (enforced where the
    destination can: PostgreSQL).
    held_files: the Files of a transaction group's member (macros/apply/transactions.sql) whose
    rows are partly held back (their transactions are not released yet): per target and
    File, the rows and transactions still held and the counts of the rows applied so far,
    which the File's Applied File Marker adds up once nothing of it is held.
    history_deletes: the deletes applied to a change-history model whose deletes leave no row
    (hard_deletes: invalidate), so that a late File's changes are placed before or after them.
-#}
{% macro contract() %}
  {{ return({
      "lineage": {
          "operation": {"name": "_cdc_operation", "type": "string", "on": "staged"},
          "sequence": {"name": "_cdc_sequence", "type": "sequence", "on": "staged"},
          "process_id": {"name": "_cdc_process_id", "type": "string", "on": "staged"},
          "file_hash": {"name": "_cdc_file_hash", "type": "string", "on": "staged"},
          "file_name": {"name": "_cdc_file_name", "type": "string", "on": "staged"},
          "row_number": {"name": "_cdc_row_number", "type": "bigint", "on": "staged"},
          "ingested_at": {"name": "_cdc_ingested_at", "type": "timestamp", "on": "staged"},
          "invocation_id": {"name": "_cdc_invocation_id", "type": "string", "on": "applied"},
          "applied_at": {"name": "_cdc_applied_at", "type": "timestamp", "on": "applied"},
          "snapshot_insert_process_id": {"name": "_cdc_insert_process_id", "type": "string", "on": "snapshot"},
          "snapshot_update_process_id": {"name": "_cdc_update_process_id", "type": "string", "on": "snapshot"},
          "snapshot_inserted_at": {"name": "_cdc_snapshot_inserted_at", "type": "timestamp", "on": "snapshot"},
          "snapshot_updated_at": {"name": "_cdc_snapshot_updated_at", "type": "timestamp", "on": "snapshot"},
          "key_hash": {"name": "_cdc_key_hash", "type": "string", "on": "staged", "modes": ["snapshot"]},
          "row_hash": {"name": "_cdc_row_hash", "type": "string", "on": "staged", "modes": ["snapshot"]},
          "valid_from": {"name": "_cdc_valid_from", "type": "sequence", "on": "history"},
          "valid_to": {"name": "_cdc_valid_to", "type": "sequence", "on": "history"},
          "closed_process_id": {"name": "_cdc_closed_process_id", "type": "string", "on": "history"},
      },
      "state_tables": {
          "staged_files": {
              "identifier": "cdc_staged_files",
              "columns": {"entity": "string", "file_hash": "string", "file_name": "string",
                          "process_id": "string", "staged_rows": "bigint", "staged_at": "timestamp",
                          "effective_date": "date"},
              "key": ["entity", "file_hash"],
          },
          "applied_files": {
              "identifier": "cdc_applied_files",
              "columns": {"target_table": "string", "file_hash": "string", "file_name": "string",
                          "process_id": "string", "invocation_id": "string", "applied_at": "timestamp",
                          "rows_inserted": "bigint", "rows_updated": "bigint", "rows_deleted": "bigint",
                          "rows_skipped": "bigint"},
              "key": ["target_table", "file_hash"],
          },
          "tombstones": {
              "identifier": "cdc_tombstones",
              "columns": {"target_table": "string", "key_text": "string", "sequence_text": "string",
                          "file_hash": "string", "process_id": "string", "invocation_id": "string",
                          "deleted_at": "timestamp"},
              "key": ["target_table", "key_text"],
          },
          "held_files": {
              "identifier": "cdc_held_files",
              "columns": {"target_table": "string", "file_hash": "string", "file_name": "string",
                          "rows_held": "bigint", "transactions_held": "bigint",
                          "rows_inserted": "bigint", "rows_updated": "bigint", "rows_deleted": "bigint",
                          "rows_skipped": "bigint", "invocation_id": "string", "updated_at": "timestamp"},
              "key": ["target_table", "file_hash"],
          },
          "history_deletes": {
              "identifier": "cdc_history_deletes",
              "columns": {"target_table": "string", "file_hash": "string", "file_row_number": "bigint",
                          "key_text": "string", "sequence_text": "string", "valid_from_text": "string",
                          "process_id": "string", "invocation_id": "string", "applied_at": "timestamp"},
              "key": ["target_table", "file_hash", "file_row_number"],
          },
      },
  }) }}
{% endmacro %}

{#- Logical name -> column name, for every lineage column (e.g. lineage_columns().process_id). -#}
{% macro lineage_columns() %}
  {%- set out = {} -%}
  {%- for key, col in cdc.contract().lineage.items() -%}
    {%- do out.update({key: col.name}) -%}
  {%- endfor -%}
  {{ return(out) }}
{% endmacro %}

{#- The lineage columns filled at one step ("staged", "applied", "snapshot", "history") on rows of an entity
    of `mode` ("cdc", "snapshot"), in order: a list of {key, name, type}. -#}
{% macro lineage_on(step, mode='cdc') %}
  {%- set out = [] -%}
  {%- for key, col in cdc.contract().lineage.items() if col.on == step and mode in col.get('modes', ['cdc', 'snapshot']) -%}
    {%- do out.append({"key": key, "name": col.name, "type": col.type}) -%}
  {%- endfor -%}
  {{ return(out) }}
{% endmacro %}

{#- The state tables: name -> {identifier, columns (name -> type), key}. -#}
{% macro state_tables() %}
  {{ return(cdc.contract().state_tables) }}
{% endmacro %}

{#- A contract type as this adapter's type; "sequence" needs the sequence column's type. -#}
{% macro contract_type(name, sequence_type=none) %}
  {%- if name == 'string' -%}{{ return(dbt.type_string()) }}
  {%- elif name == 'bigint' -%}{{ return(dbt.type_bigint()) }}
  {%- elif name == 'timestamp' -%}{{ return(dbt.type_timestamp()) }}
  {%- elif name == 'date' -%}{{ return('date') }}
  {%- elif name == 'sequence' and sequence_type -%}{{ return(sequence_type) }}
  {%- endif -%}
  {{ exceptions.raise_compiler_error("cdc contract: no type " ~ name ~ " here") }}
{% endmacro %}
