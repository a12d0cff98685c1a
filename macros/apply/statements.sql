{#-
  The apply: an orchestrating macro over named steps, each dispatched, so an adapter (or a
  project) overrides one step without forking the others. The steps, in order:

    lock              serialise applies of one table where the destination has locks;
    dedupe_target     only when the target holds duplicate keys (a legacy table, a manual
                      insert: ADR-019): keep one row per key, the highest sequence, then the
                      latest applied (the check, one aggregate over the keys, runs before the
                      statements are rendered: cdc.target_has_duplicate_keys, and warns);
    batch_files       the Files staged for this entity without a marker for this target;
    truncate          only when the entity declares a truncate operation (T): the batch's
                      last truncate, if newer than the table's watermark;
    classify          their rows' last change per key, classified against the target and the
                      tombstones (insert, update, delete, stale); with partial updates
                      (null_means: unchanged), an unchanged column filled from the key's
                      earlier changes or its target row;
    truncate_target   with a truncate in the batch: delete the target rows not newer than it;
    merge_target      MERGE into the target: insert new keys, update or delete only with a
                      newer sequence;
    merge_tombstones  remember each applied delete's key and sequence, forget it on re-insert;
                      a truncate is remembered as the table's watermark (an empty key);
    insert_markers    one Applied File Marker per File, with its row counts (a truncate's
                      File: the rows it removed are in rows_deleted);
    key_index         PostgreSQL: a unique index on the keys, when the target has none
                      (cdc.key_index_state).

  This file holds the order and the context; each step's macros are in apply/steps/
  (lock_and_dedupe, batch_files, truncate, classify, merge, markers), and the pieces every apply
  path shares in apply/sql_helpers.sql.

  The adapter wrappers (spark.sql, databricks.sql) run the statements in order, or as one
  transaction (postgres.sql, bigquery.sql). Replaying them after a crash anywhere gives the same
  target: every change is compared with the sequence already in the target or its tombstone,
  so an applied change is "stale" the second time.

  Every step takes one argument, the apply context (cdc._apply_context): the relations, the
  quoted names and the rendered literals it needs. Each returns one SQL statement, or '' for
  none.
-#}

{% macro apply_statements(target, source, columns, keys, entity, target_name, dedupe=false, key_index=false) %}
  {%- set ctx = cdc._apply_context(target, source, columns, keys, entity, target_name) -%}
  {%- do ctx.update({'dedupe': dedupe and not ctx.history, 'key_index': key_index and not ctx.history}) -%}
  {%- if ctx.mode == 'snapshot' -%}
    {{ return(cdc.apply_snapshot_statements(ctx)) }}
  {%- elif ctx.history -%}
    {{ return(cdc.apply_history_statements(ctx)) }}
  {%- endif -%}
  {{ return(cdc.apply_steps([
      cdc.apply_lock_sql(ctx),
      cdc.apply_dedupe_target_sql(ctx),
      cdc.apply_batch_files_sql(ctx),
      cdc.apply_truncate_sql(ctx),
      cdc.apply_classify_sql(ctx),
      cdc.apply_truncate_target_sql(ctx),
      cdc.apply_merge_target_sql(ctx),
      cdc.apply_merge_tombstones_sql(ctx),
      cdc.apply_insert_markers_sql(ctx),
      cdc.apply_held_files_sql(ctx),
      cdc.apply_key_index_sql(ctx),
  ])) }}
{% endmacro %}

{#- The one step runner of every apply path (this one, history.sql, snapshot.sql): the steps'
    SQL in order, each trimmed, the empty ones (a step with nothing to do) left out. -#}
{% macro apply_steps(step_sql) %}
  {%- set statements = [] -%}
  {%- for sql in step_sql if sql | trim -%}
    {%- do statements.append(sql | trim) -%}
  {%- endfor -%}
  {{ return(statements) }}
{% endmacro %}

{#- What the steps share. Arguments: target (relation), source (a relation or a parenthesised
    select with the model's columns), columns (the target's columns, api.Column), keys (the
    unique_key's columns), entity (its name in the staged-files manifest), target_name (the
    markers' and tombstones' key for this table). -#}
{% macro _apply_context(target, source, columns, keys, entity, target_name) %}
  {%- set q = adapter.quote -%}
  {%- set by_name = {} -%}
  {%- for c in columns -%}{%- do by_name.update({c.name | lower: c}) -%}{%- endfor -%}
  {%- set lin = cdc.lineage_columns() -%}
  {%- set settings = cdc.entity_settings(entity) -%}
  {%- set mode = settings.get('mode', 'cdc') -%}
  {%- set required = [] -%}
  {%- for col in cdc.lineage_on('staged', mode) -%}{%- do required.append(col.name) -%}{%- endfor -%}
  {%- for required_name in required + (keys | map('lower') | list) -%}
    {%- if required_name | lower not in by_name -%}
      {{ exceptions.raise_compiler_error(
          "apply of " ~ target_name ~ ": column " ~ required_name ~ " is missing from the model; "
          ~ "select the key columns and {{ cdc.lineage_select() }} from cdc.unapplied(...)") }}
    {%- endif -%}
  {%- endfor -%}
  {%- set applied = cdc.lineage_on('applied') -%}
  {%- set history = cdc.is_history_model() -%}
  {%- set hist = cdc.history_settings() if history else {} -%}
  {%- if history and mode == 'snapshot' and hist.valid_from -%}
    {{ exceptions.raise_compiler_error("model " ~ target_name ~ ": meta.cdc.valid_from is for change entities; "
        ~ "a snapshot entity's versions are valid from their extract's effective date") }}
  {%- endif -%}
  {%- set applied_names = cdc.lineage_on('applied') | map(attribute='name') | list -%}
  {%- if history -%}
    {%- do lin.update(hist.names) -%}
    {%- do applied_names.extend(hist.names.values()) -%}
    {%- for name in hist.names.values() if name | lower not in by_name -%}
      {{ exceptions.raise_compiler_error("history model " ~ target_name ~ ": column " ~ name ~ " is missing "
          ~ "from the table (renamed history columns need --full-refresh)") }}
    {%- endfor -%}
  {%- endif -%}
  {%- set valid_from = hist.get('valid_from') or lin.sequence -%}
  {%- if valid_from | lower not in by_name -%}
    {{ exceptions.raise_compiler_error("history model " ~ target_name ~ ": meta.cdc.valid_from names "
        ~ valid_from ~ ", which the model does not select") }}
  {%- endif -%}
  {%- set invocation = cdc.sql_string(invocation_id) -%}
  {%- set now = cdc.now_utc() -%}
  {%- set applied_values = {'invocation_id': invocation, 'applied_at': now} -%}
  {%- set applied_set = [] -%}
  {%- for col in applied -%}
    {%- if col.key not in applied_values -%}
      {{ exceptions.raise_compiler_error("cdc contract: the apply cannot fill " ~ col.name
          ~ " (no value named " ~ col.key ~ "; it knows: invocation_id, applied_at)") }}
    {%- endif -%}
    {%- do applied_set.append({'column': q(col.name), 'value': applied_values[col.key]}) -%}
  {%- endfor -%}
  {%- set quoted_lin = {} -%}
  {%- for key, name in lin.items() -%}{%- do quoted_lin.update({key: q(name)}) -%}{%- endfor -%}
  {%- set quoted_keys = [] -%}
  {%- for k in keys -%}{%- do quoted_keys.append(q(by_name[k | lower].name)) -%}{%- endfor -%}
  {%- set model_columns = [] -%}
  {%- for c in columns if (c.name | lower) not in applied_names -%}{%- do model_columns.append(q(c.name)) -%}{%- endfor -%}
  {%- set changes = cdc.change_settings(entity) if mode != 'snapshot' else {'unchanged': [], 'truncates': false} -%}
  {%- set partial = [] -%}
  {%- for c in columns if (c.name | lower) in changes.unchanged and (c.name | lower) not in (keys | map('lower') | list) -%}
    {%- do partial.append({'column': q(c.name), 'value': q('cdc__v' ~ loop.index), 'fill': q('cdc__fill' ~ loop.index)}) -%}
  {%- endfor -%}
  {%- set ledger = cdc.model_ledger(entity) if mode == 'cdc' else none -%}
  {%- set scratch = cdc.scratch_catalog() -%}
  {%- set current = target -%}
  {%- if history -%}
    {%- set current = '(select * from ' ~ target ~ ' as cdc_open where '
        ~ cdc._is_open('cdc_open', q(lin.valid_to), hist.valid_to_current) ~ ')' -%}
  {%- endif -%}
  {{ return({
      'target': target,
      'current': current,
      'history': history,
      'source': source,
      'key_columns': quoted_keys,
      'model_columns': model_columns,
      'all_columns': columns | map(attribute='name') | list,
      'applied_set': applied_set,
      'lin': quoted_lin,
      'sequence_type': by_name[lin.sequence].data_type,
      'valid_from': q(by_name[valid_from | lower].name),
      'time_type': by_name[valid_from | lower].data_type,
      'hard_deletes': hist.get('hard_deletes'),
      'valid_to_current': hist.get('valid_to_current'),
      'history_deletes': cdc.state_relation('history_deletes'),
      'mode': mode,
      'partial': partial,
      'truncates': changes.truncates,
      'truncate': cdc.scratch_relation(target, 'truncate', scratch),
      'scratch_catalog': scratch,
      'kind': settings.get('snapshot_kind'),
      'entity': cdc.sql_string(entity),
      'this_table': cdc.sql_string(target_name),
      'target_name': target_name,
      'invocation': invocation,
      'now': now,
      'files': cdc.state_relation('staged_files'),
      'markers': cdc.state_relation('applied_files'),
      'tombstones': cdc.state_relation('tombstones'),
      'batch_files': cdc.batch_files_relation(target, mode),
      'batch': cdc.scratch_relation(target, 'batch', scratch),
      'ledger': ledger,
      'held_files': cdc.state_relation('held_files'),
      'staged': cdc.staged_relation(entity) if ledger is not none else none,
      'tx_column': q(cdc.transaction_fields(entity).tx) if ledger is not none else none,
  }) }}
{% endmacro %}
