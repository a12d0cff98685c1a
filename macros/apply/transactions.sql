{#-
  Transaction consistency for a group of entities (orders and their lines, ...), from
  Debezium's transaction metadata (BEGIN/END records; an END counts the events per table).

  The ledger model of a group (dbt_project/models/<group>.sql):

    {{ config(materialized='incremental', unique_key='transaction_id',
              incremental_strategy='merge', meta={'cdc': {'transaction_ledger': true}}) }}
    {{ cdc.transaction_ledger('shop_transactions', source('cdc_staging', 'shop_transactions'),
                              {'orders': ref('stg_orders'), 'order_lines': ref('stg_order_lines')}) }}

  holds one row per transaction with its status:
    released     complete (every event the END counts for a member table is staged) and
                 committed before the earliest transaction still open: applied by the
                 members' apply models (cdc.unapplied(..., transactions=ref('<ledger>')));
    held         incomplete, or complete but after an incomplete one: waits;
    quarantined  incomplete for longer than quarantine_after_seconds of source time (the
                 newest ts_ms staged for the group, minus the transaction's first): never
                 applied, not even in part.
  Statuses released and quarantined are final (the ledger reads its previous state), so the
  cut only moves forward: after every build, each member table holds all released
  transactions and nothing of any other. Events outside transactions (Debezium's snapshot
  reads, truncates) are not held. held rows past report_after_seconds are `overdue`.
-#}

{% macro transaction_ledger(entity, transactions, members) %}
  {%- if not execute -%}{{ return('select 1 as transaction_id') }}{%- endif -%}
  {%- set q = adapter.quote -%}
  {%- set lin = cdc.lineage_columns() -%}
  {%- set settings = cdc.entity_settings(entity) -%}
  {%- if settings.get('mode') != 'transactions' -%}
    {{ exceptions.raise_compiler_error("cdc.transaction_ledger: " ~ entity ~ " is not a transaction metadata entity (meta.cdc.mode: transactions)") }}
  {%- endif -%}
  {%- set collections = settings.get('members', {}) -%}
  {%- for name in collections if name not in members -%}
    {{ exceptions.raise_compiler_error("cdc.transaction_ledger(" ~ entity ~ "): member " ~ name ~ " is missing: pass {'" ~ name ~ "': ref('<its staging model>')}") }}
  {%- endfor -%}
  {%- set quarantine_ms = (settings.get('quarantine_after_seconds', 86400) | int) * 1000 -%}
  {%- set report_ms = (settings.get('report_after_seconds', 300) | int) * 1000 -%}
  {%- set str, big = dbt.type_string(), dbt.type_bigint() -%}
  {%- set member_list = [] -%}
  {%- for name, relation in members.items() -%}
    {%- if name not in collections -%}
      {{ exceptions.raise_compiler_error("cdc.transaction_ledger(" ~ entity ~ "): " ~ name ~ " is not in its meta.cdc.members") }}
    {%- endif -%}
    {%- set fields = cdc.transaction_fields(name) -%}
    {%- do member_list.append({'relation': relation, 'collection': cdc.sql_string(collections[name]),
        'tx': q(fields.tx), 'order': q(fields.order), 'ts': q(fields.ts)}) -%}
  {%- endfor -%}
  {%- set in_group -%}({% for m in member_list %}{{ m.collection }}{{ ', ' if not loop.last }}{% endfor %}){%- endset -%}
  {%- set ts = dbt.type_timestamp() -%}
  {#- One pass over each input: every fact about a transaction (its BEGIN and END records, each
      member's events, the ledger's previous row) becomes a row of cdc_facts; grouped per
      (transaction, collection), then per transaction; the clock and the earliest open
      transaction are windows over all of them. (Each CTE is read once: Spark inlines a CTE
      at every reference, and plans and runs it again there.) -#}
  {%- set sql -%}
with cdc_facts as (
  select {{ q('id') }} as tx_id, {{ q('data_collection') }} as data_collection,
    case when {{ q('status') }} = 'BEGIN' then {{ q('ts_ms') }} end as begin_ms,
    case when {{ q('status') }} = 'END' then {{ q('ts_ms') }} end as end_ms,
    {{ q('ts_ms') }} as first_ms, {{ q('ts_ms') }} as last_ms,
    case when {{ q('status') }} = 'END' and {{ q('data_collection') }} in {{ in_group }}
      then {{ q('collection_events') }} end as expected,
    cast(null as {{ big }}) as staged,
    cast(null as {{ str }}) as prev_status, cast(null as {{ ts }}) as prev_settled_at
  from {{ transactions }}
  {%- for m in member_list %}
  union all
  select {{ m.tx }} as tx_id, {{ m.collection }} as data_collection,
    cast(null as {{ big }}) as begin_ms, cast(null as {{ big }}) as end_ms,
    min({{ m.ts }}) as first_ms, max({{ m.ts }}) as last_ms,
    cast(null as {{ big }}) as expected, count(distinct {{ m.order }}) as staged,
    cast(null as {{ str }}) as prev_status, cast(null as {{ ts }}) as prev_settled_at
  from {{ m.relation }}
  where {{ m.tx }} is not null
  group by {{ m.tx }}
  {%- endfor %}
  {%- if is_incremental() %}
  union all
  select {{ q('transaction_id') }} as tx_id, cast(null as {{ str }}) as data_collection,
    cast(null as {{ big }}) as begin_ms, cast(null as {{ big }}) as end_ms,
    cast(null as {{ big }}) as first_ms, cast(null as {{ big }}) as last_ms,
    cast(null as {{ big }}) as expected, cast(null as {{ big }}) as staged,
    {{ q('status') }} as prev_status, {{ q('settled_at') }} as prev_settled_at
  from {{ this }}
  {%- endif %}
),
cdc_per_collection as (
  select tx_id, min(begin_ms) as begin_ms, max(end_ms) as end_ms, min(first_ms) as first_ms,
    max(last_ms) as last_ms, max(expected) as expected, sum(staged) as staged,
    max(prev_status) as prev_status, max(prev_settled_at) as prev_settled_at
  from cdc_facts
  group by tx_id, data_collection
),
cdc_per_tx as (
  select tx_id, min(begin_ms) as begin_ms, max(end_ms) as end_ms, min(first_ms) as start_ms,
    max(last_ms) as last_ms, sum(expected) as expected, sum(staged) as staged,
    sum(case when expected is not null and coalesce(staged, 0) < expected then 1 else 0 end) as short,
    max(prev_status) as prev_status, max(prev_settled_at) as prev_settled_at
  from cdc_per_collection
  group by tx_id
),
cdc_judged as (
  select cdc_t.*,
    (end_ms is not null and short = 0) as complete,
    max(last_ms) over () - start_ms as age_ms
  from cdc_per_tx as cdc_t
),
cdc_settled as (
  select cdc_j.*,
    case
      when prev_status in ('released', 'quarantined') then prev_status
      when not complete and age_ms > {{ quarantine_ms }} then 'quarantined'
    end as settled
  from cdc_judged as cdc_j
),
cdc_status as (
  select cdc_s.*,
    coalesce(settled, case
      when complete and (end_ms < min(case when settled is null and not complete then start_ms end) over ()
        or min(case when settled is null and not complete then start_ms end) over () is null)
      then 'released' else 'held' end) as new_status
  from cdc_settled as cdc_s
)
select
  cast(tx_id as {{ str }}) as {{ q('transaction_id') }},
  cast(new_status as {{ str }}) as {{ q('status') }},
  cast(begin_ms as {{ big }}) as {{ q('begin_ms') }},
  cast(end_ms as {{ big }}) as {{ q('end_ms') }},
  cast(start_ms as {{ big }}) as {{ q('start_ms') }},
  cast(coalesce(expected, 0) as {{ big }}) as {{ q('expected_events') }},
  cast(coalesce(staged, 0) as {{ big }}) as {{ q('staged_events') }},
  cast(case when new_status = 'held' then age_ms end as {{ big }}) as {{ q('held_ms') }},
  (new_status = 'held' and age_ms > {{ report_ms }}) as {{ q('overdue') }},
  cast(case
    when prev_status = new_status then prev_settled_at
    when new_status in ('released', 'quarantined') then {{ cdc.now_utc() }}
  end as {{ ts }}) as {{ q('settled_at') }}
from cdc_status
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}

{#- A group member's columns the ledger and the gate read: the ones its declaration keeps from
    transaction.id, transaction.data_collection_order and ts_ms (debezium.fields). -#}
{% macro transaction_fields(entity) %}
  {%- set fields = (cdc.entity_settings(entity).get('debezium') or {}).get('fields') or {} -%}
  {%- set out = {} -%}
  {%- for column, field in fields.items() -%}
    {%- if field == 'transaction.id' -%}{%- do out.update({'tx': column}) -%}
    {%- elif field == 'transaction.data_collection_order' -%}{%- do out.update({'order': column}) -%}
    {%- elif field == 'ts_ms' -%}{%- do out.update({'ts': column}) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if out | length != 3 -%}
    {{ exceptions.raise_compiler_error("entity " ~ entity ~ " is in a transaction group: keep transaction.id, transaction.data_collection_order and ts_ms as columns (meta.cdc.debezium.fields)") }}
  {%- endif -%}
  {{ return(out) }}
{% endmacro %}

{#- cdc.unapplied() of a group member: the joins and the filter that keep the rows of
    released transactions (and rows outside any transaction), less those an earlier build
    already applied from a File it applied in part (released before its cdc_held_files row
    was last written). -#}
{% macro released_joins(alias, entity, ledger) %}
  {%- set q = adapter.quote -%}
  {%- set tx = alias ~ '.' ~ q(cdc.transaction_fields(entity).tx) -%}
  {%- set sql -%}
    left join {{ cdc.state_relation('held_files') }} as cdc_part
      on cdc_part.{{ q('target_table') }} = {{ cdc.sql_string(cdc.target_name()) }}
      and cdc_part.{{ q('file_hash') }} = {{ alias }}.{{ q(cdc.lineage_columns().file_hash) }}
    left join (
      select cdc_ledger.{{ q('transaction_id') }} as cdc_tx, cdc_ledger.{{ q('settled_at') }} as cdc_settled_at
      from {{ ledger }} as cdc_ledger
      where cdc_ledger.{{ q('status') }} = 'released'
    ) as cdc_released on cdc_released.cdc_tx = {{ tx }}
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
{% macro released_filter(alias, entity) %}
  {%- set q = adapter.quote -%}
  {%- set tx = alias ~ '.' ~ q(cdc.transaction_fields(entity).tx) -%}
  {{ return('((' ~ tx ~ ' is null and cdc_part.' ~ q('file_hash') ~ ' is null) or (cdc_released.cdc_tx is not null and '
      ~ '(cdc_part.' ~ q('updated_at') ~ ' is null or cdc_released.cdc_settled_at > cdc_part.' ~ q('updated_at') ~ ')))') }}
{% endmacro %}

{#- The ledger this apply model reads, when its entity is in a transaction group: the upstream
    model declared meta.cdc.transaction_ledger; none (no group) or a compiler error. -#}
{% macro model_ledger(entity) %}
  {%- if not cdc.entity_settings(entity).get('transactions') -%}{{ return(none) }}{%- endif -%}
  {%- for uid in model.depends_on.nodes if uid in graph.nodes -%}
    {%- set node = graph.nodes[uid] -%}
    {%- if ((node.config.meta or {}).get('cdc') or {}).get('transaction_ledger') -%}
      {{ return(api.Relation.create(database=node.database, schema=node.schema, identifier=node.alias)) }}
    {%- endif -%}
  {%- endfor -%}
  {{ exceptions.raise_compiler_error("model " ~ model.name ~ ": entity " ~ entity ~ " is in transaction group "
      ~ cdc.entity_settings(entity).get('transactions') ~ "; select from cdc.unapplied(ref('<its staging model>'), "
      ~ "transactions=ref('<the group's ledger model>'))") }}
{% endmacro %}

{#- The staged table of an entity, as a relation (from its source declaration). -#}
{% macro staged_relation(entity) %}
  {%- for node in graph.sources.values() if node.name == entity and ((node.meta or {}).get('cdc') or (node.config.meta or {}).get('cdc')) -%}
    {{ return(api.Relation.create(database=node.database, schema=node.schema, identifier=node.identifier)) }}
  {%- endfor -%}
  {{ exceptions.raise_compiler_error("no staged source for entity " ~ entity) }}
{% endmacro %}

{#- A group member's Files applied in part (rows of transactions not yet released): their
    held rows and transactions and the counts applied so far, added to this build's (the
    markers step's counts, ctx.marker_counts); a File with nothing held any more (its marker
    was written by the markers step) is removed. One MERGE, after the markers step. -#}
{% macro apply_held_files_sql(ctx) %}
  {%- if ctx.ledger is none -%}{{ return('') }}{%- endif -%}
  {{ return(adapter.dispatch('apply_held_files_sql', 'cdc')(ctx)) }}
{% endmacro %}
{% macro default__apply_held_files_sql(ctx) %}
  {%- set q = adapter.quote -%}
  {%- set counts = ctx.marker_counts -%}
  {%- set names = ['rows_inserted', 'rows_updated', 'rows_deleted', 'rows_skipped'] -%}
  {%- set sql -%}
    merge into {{ ctx.held_files }} as cdc_t
    using (
      select cdc_files.{{ q('file_hash') }} as cdc_file_hash, cdc_files.{{ q('file_name') }} as cdc_file_name,
        cdc_files.{{ q('cdc__held') }} as cdc_rows_held, coalesce(cdc_tx.n, 0) as cdc_tx_held,
        {%- for name in names %}
        {{ counts[name] }} as cdc_{{ name }}{{ ',' if not loop.last }}
        {%- endfor %}
      from {{ ctx.batch_files }} as cdc_files
      {{ ctx.marker_joins }}
      left join {{ cdc.held_rows_sql(ctx, 'count(distinct cdc_st.' ~ ctx.tx_column ~ ')') }} as cdc_tx
        on cdc_tx.cdc_file_hash = cdc_files.{{ q('file_hash') }}
    ) as cdc_s
    on cdc_t.{{ q('target_table') }} = {{ ctx.this_table }} and cdc_t.{{ q('file_hash') }} = cdc_s.cdc_file_hash
    when matched and cdc_s.cdc_rows_held = 0 then delete
    when matched then update set
      {{ q('rows_held') }} = cdc_s.cdc_rows_held,
      {{ q('transactions_held') }} = cdc_s.cdc_tx_held,
      {%- for name in names %}
      {{ q(name) }} = cdc_t.{{ q(name) }} + cdc_s.cdc_{{ name }},
      {%- endfor %}
      {{ q('invocation_id') }} = {{ ctx.invocation }},
      {{ q('updated_at') }} = {{ ctx.now }}
    when not matched and cdc_s.cdc_rows_held > 0 then insert (
      {%- for c in cdc.state_tables().held_files.columns %}{{ q(c) }}{{ ', ' if not loop.last }}{% endfor -%}
    ) values (
      {{ ctx.this_table }}, cdc_s.cdc_file_hash, cdc_s.cdc_file_name, cdc_s.cdc_rows_held, cdc_s.cdc_tx_held,
      {%- for name in names %} cdc_s.cdc_{{ name }},{% endfor %}
      {{ ctx.invocation }}, {{ ctx.now }}
    )
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}

{#- The ledger model's post-hook: an Applied File Marker (for the ledger table) for each staged
    File of the transaction metadata entity without one, so that `runner reconcile` commits the
    metadata Files the ledger has read (rows_inserted: the File's staged rows).
      post_hook: ["{{ cdc.ledger_markers('shop_transactions') }}"] -#}
{% macro ledger_markers(entity) %}
  {%- if not execute -%}{{ return('') }}{%- endif -%}
  {%- do cdc.create_state_tables() -%}
  {%- set q = adapter.quote -%}
  {%- set this_table = cdc.sql_string(cdc.target_name()) -%}
  {%- set columns = cdc._state_values('applied_files', {
      'target_table': this_table,
      'file_hash': 'cdc_files.' ~ q('file_hash'),
      'file_name': 'cdc_files.' ~ q('file_name'),
      'process_id': 'cdc_files.' ~ q('process_id'),
      'invocation_id': cdc.sql_string(invocation_id),
      'applied_at': cdc.now_utc(),
      'rows_inserted': 'cdc_files.' ~ q('staged_rows'),
      'rows_updated': '0',
      'rows_deleted': '0',
      'rows_skipped': '0',
  }) -%}
  {%- set sql -%}
    insert into {{ cdc.state_relation('applied_files') }} ({% for c in columns %}{{ q(c.name) }}{{ ', ' if not loop.last }}{% endfor %})
    select
      {%- for c in columns %}
      {{ c.value }}{{ ',' if not loop.last }}
      {%- endfor %}
    from {{ cdc.state_relation('staged_files') }} as cdc_files
    where cdc_files.{{ q('entity') }} = {{ cdc.sql_string(entity) }}
      and cdc_files.{{ q('file_hash') }} not in (
        select cdc_markers.{{ q('file_hash') }} from {{ cdc.state_relation('applied_files') }} as cdc_markers
        where cdc_markers.{{ q('target_table') }} = {{ this_table }}
      )
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}

{#- Per File of a member, `aggregate` (as n) over its staged rows whose transaction is neither
    released nor quarantined (alias cdc_st): a parenthesised select to join on cdc_file_hash.
    An anti join by equality, not NOT IN: the ledger keeps every transaction ever settled, and
    Spark builds a NOT IN's subquery into one broadcast hash table, which millions of
    transactions would not fit in the driver's heap. -#}
{% macro held_rows_sql(ctx, aggregate) %}
  {%- set q = adapter.quote -%}
  {%- set sql -%}
    (
      select cdc_st.{{ ctx.lin.file_hash }} as cdc_file_hash, {{ aggregate }} as n
      from {{ ctx.staged }} as cdc_st
      left join (
        select cdc_ledger.{{ q('transaction_id') }} as cdc_settled_tx from {{ ctx.ledger }} as cdc_ledger
        where cdc_ledger.{{ q('status') }} in ('released', 'quarantined')
      ) as cdc_settled on cdc_settled.cdc_settled_tx = cdc_st.{{ ctx.tx_column }}
      where cdc_st.{{ ctx.tx_column }} is not null and cdc_settled.cdc_settled_tx is null
      group by cdc_st.{{ ctx.lin.file_hash }}
    )
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
