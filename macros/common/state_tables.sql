{#-
  The framework's own tables next to the staged rows: which Files are staged (written by
  `runner ingest`), which Files are applied to which target (Applied File Markers, written by
  the apply), and which keys were deleted at which sequence (tombstones, written by the apply).
  They are declared as the dbt source `cdc_state` (macros/models/cdc_state.yml) so that they
  show in lineage. The Python runner reads this file too (runner/lineage.py).
  Append new columns at the end; never reorder or rename.
-#}
{% macro state_tables() %}
  {{ return(adapter.dispatch('state_tables', 'cdc')()) }}
{% endmacro %}

{% macro default__state_tables() %}
  {{ return({
      "staged_files": {
          "identifier": "cdc_staged_files",
          "columns": ["entity", "file_hash", "file_name", "process_id", "staged_rows", "staged_at"],
      },
      "applied_files": {
          "identifier": "cdc_applied_files",
          "columns": ["target_table", "file_hash", "file_name", "process_id", "invocation_id",
                      "applied_at", "rows_inserted", "rows_updated", "rows_deleted",
                      "rows_skipped"],
      },
      "tombstones": {
          "identifier": "cdc_tombstones",
          "columns": ["target_table", "key_text", "sequence_text", "file_hash", "process_id",
                      "invocation_id", "deleted_at"],
      },
  }) }}
{% endmacro %}
