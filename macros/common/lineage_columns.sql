{#-
  The reserved lineage columns the framework adds to staged, target and history rows.
  Staged rows carry the first seven; target rows also carry invocation_id and applied_at;
  snapshot (SCD Type 2) rows add the four snapshot_* columns.
  This macro is the only place the names are written: the Python runner reads this file too
  (runner/lineage.py). Append new columns at the end; never reorder or rename.
-#}
{% macro lineage_columns() %}
  {{ return(adapter.dispatch('lineage_columns', 'cdc')()) }}
{% endmacro %}

{% macro default__lineage_columns() %}
  {{ return({
      "operation": "_cdc_operation",
      "sequence": "_cdc_sequence",
      "process_id": "_cdc_process_id",
      "file_hash": "_cdc_file_hash",
      "file_name": "_cdc_file_name",
      "row_number": "_cdc_row_number",
      "ingested_at": "_cdc_ingested_at",
      "invocation_id": "_cdc_invocation_id",
      "applied_at": "_cdc_applied_at",
      "snapshot_insert_process_id": "_cdc_insert_process_id",
      "snapshot_update_process_id": "_cdc_update_process_id",
      "snapshot_inserted_at": "_cdc_snapshot_inserted_at",
      "snapshot_updated_at": "_cdc_snapshot_updated_at",
  }) }}
{% endmacro %}
