{#- dbt-postgres (1.11): the whole apply is the materialization's `main` statement, inside the
    transaction dbt opens for the model, so target changes and markers commit together. -#}

{% macro postgres__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates=none) %}
  {%- if cdc.is_apply_model() -%}
    {{ return(cdc.model_apply_statements(target, source) | join(';\n') ~ ';') }}
  {%- endif -%}
  {{ return(dbt.default__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates)) }}
{% endmacro %}

{% macro postgres__create_table_as(temporary, relation, sql) %}
  {%- if temporary and cdc.is_apply_model() -%}
    {#- The model's rows (the Files without a marker, a group's released parts) are read under
        the apply's lock, in the model's transaction: a second build of the table waits here,
        then reads only what the first left (a part it applied is not counted twice). A view,
        not a table: the apply's statements read the staged rows themselves, not a copy of
        them written first. -#}
    {%- set sql_header = config.get('sql_header', none) -%}
    {{ return(cdc.postgres_apply_lock(cdc.target_name()) ~ ';\n'
        ~ (sql_header ~ '\n' if sql_header is not none else '')
        ~ 'create temporary view ' ~ relation ~ ' as (\n' ~ sql ~ '\n)') }}
  {%- endif -%}
  {#- The first create of an apply model, a transaction group's ledger or a dbt snapshot: dbt
      found the table absent when the build started. Under the apply's lock (in the model's
      transaction, with the reset and the CREATE that follow) it is asked again, so a second
      build waits for one that created it meanwhile: an apply model is then applied as an
      incremental run on what that build committed; a ledger or snapshot is left to it (the
      ledger reads every staged transaction again at its next build, a snapshot takes the
      rows' state at its next run). -#}
  {%- set apply = not temporary and cdc.is_apply_model() -%}
  {%- if not temporary and execute and (apply or cdc.created_under_lock()) -%}
    {%- do run_query(cdc.postgres_apply_lock(cdc.target_name())) -%}
    {%- if relation.identifier == this.identifier and cdc.relation_exists_now(relation) -%}
      {%- if apply -%}
        {{ return(cdc.model_apply_statements(relation, '(' ~ sql ~ ')') | join(';\n') ~ ';') }}
      {%- endif -%}
      {{ return('select 1 as cdc_created_by_another_build') }}
    {%- endif -%}
  {%- endif -%}
  {%- if not apply -%}
    {{ return(dbt.postgres__create_table_as(temporary, relation, sql)) }}
  {%- endif -%}
  {%- set create = dbt.postgres__create_table_as(false, relation, cdc.empty_target_select(sql)) -%}
  {{ return(cdc.create_then_apply_statements(relation, sql, create) | join(';\n') ~ ';') }}
{% endmacro %}

{#- Which other tables the package makes are created under the apply's lock on PostgreSQL: a
    transaction group's ledger and dbt snapshots. -#}
{% macro created_under_lock() %}
  {%- if model.resource_type == 'snapshot' -%}{{ return(true) }}{%- endif -%}
  {{ return(((config.get('meta') or {}).get('cdc') or {}).get('transaction_ledger', false) is sameas true) }}
{% endmacro %}

{#- Views on PostgreSQL: dbt's own view materialization decides from the relation cache filled
    when the build started, then renames the old view away and the new one in: two builds
    rebuilding one view at once fail on each other's names (`relation ... already exists`,
    `tuple concurrently updated`). This one takes a lock per view in the model's transaction,
    looks at the catalog (not the cache), drops what is there and creates the view, all in that
    transaction: a second build waits, then replaces the first's view. Readers see the old view
    or the new one. A view that would come out the same (the same definition and columns as the
    model's SQL gives now, compared through a temporary view) is left as it is: no lock taken
    from its readers, no view built on it dropped. As with dbt's, views built on it are dropped with it and rebuilt by the
    build that selects them. dbt uses a package's materialization only when the root project
    forwards to it (dbt_project/macros/materializations.sql). -#}
{% materialization view, adapter='postgres' %}
  {%- set target_relation = this.incorporate(type='view') -%}
  {%- set grant_config = config.get('grants') -%}
  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  {{ run_hooks(pre_hooks, inside_transaction=True) }}
  {%- do run_query('select pg_advisory_xact_lock(hashtextextended(' ~ cdc.sql_string('cdc view ' ~ cdc.target_name()) ~ ', 0))') -%}
  {%- set existing_relation = cdc.postgres_relation_now(target_relation) -%}
  {%- if existing_relation is not none and existing_relation.is_view
        and cdc.postgres_view_unchanged(target_relation, sql) -%}
    {% call statement('main') -%}
      select 'view unchanged' as status
    {%- endcall %}
  {%- else -%}
    {%- if existing_relation is not none -%}
      {%- do adapter.drop_relation(existing_relation) -%}
    {%- endif -%}
    {% call statement('main') -%}
      {{ get_create_view_as_sql(target_relation, sql) }}
    {%- endcall %}
  {%- endif %}
  {%- set should_revoke = should_revoke(existing_relation, full_refresh_mode=True) -%}
  {%- do apply_grants(target_relation, grant_config, should_revoke=should_revoke) -%}
  {%- do persist_docs(target_relation, model) -%}
  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ adapter.commit() }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}
  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}

{#- PostgreSQL: whether the view `relation` is what `sql` would make of it now. A temporary view
    of `sql` is made in this transaction and compared with it, definition (as PostgreSQL
    prints it, `*` expanded to the columns of today) and columns (names and types). -#}
{% macro postgres_view_unchanged(relation, sql) %}
  {%- set probe = 'cdc_view_probe' -%}
  {%- do run_query('create temporary view ' ~ probe ~ ' as ' ~ sql) -%}
  {%- set existing = cdc.sql_string(adapter.quote(relation.schema) ~ '.' ~ adapter.quote(relation.identifier)) ~ '::regclass' -%}
  {%- set now = cdc.sql_string('pg_temp.' ~ probe) ~ '::regclass' -%}
  {%- set compare -%}
    select pg_catalog.pg_get_viewdef({{ existing }}) = pg_catalog.pg_get_viewdef({{ now }})
      and array(select a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
                from pg_catalog.pg_attribute as a
                where a.attrelid = {{ existing }} and a.attnum > 0 and not a.attisdropped
                order by a.attnum)
        = array(select a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
                from pg_catalog.pg_attribute as a
                where a.attrelid = {{ now }} and a.attnum > 0 and not a.attisdropped
                order by a.attnum)
  {%- endset -%}
  {%- set same = run_query(compare).columns[0].values()[0] -%}
  {%- do run_query('drop view pg_temp.' ~ probe) -%}
  {{ return(same is sameas true) }}
{% endmacro %}
