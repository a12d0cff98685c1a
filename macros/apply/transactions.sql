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
  {%- set sql -%}
with cdc_meta as (
  select {{ q('id') }} as tx_id, {{ q('status') }} as status, {{ q('ts_ms') }} as ts_ms,
    {{ q('data_collection') }} as data_collection, {{ q('collection_events') }} as n
  from {{ transactions }}
),
cdc_events as (
  {%- for m in member_list %}
  select {{ m.tx }} as tx_id, {{ m.collection }} as data_collection,
    count(distinct {{ m.order }}) as n, min({{ m.ts }}) as first_ms, max({{ m.ts }}) as last_ms
  from {{ m.relation }}
  where {{ m.tx }} is not null
  group by {{ m.tx }}
  {{- ' union all' if not loop.last }}
  {%- endfor %}
),
cdc_prev as (
  {%- if is_incremental() %}
  select {{ q('transaction_id') }} as tx_id, {{ q('status') }} as status, {{ q('settled_at') }} as settled_at
  from {{ this }}
  {%- else %}
  select cast(null as {{ str }}) as tx_id, cast(null as {{ str }}) as status,
    cast(null as {{ dbt.type_timestamp() }}) as settled_at
  from (select 1 as cdc_one) as cdc_none where 1 = 0
  {%- endif %}
),
cdc_ids as (
  select tx_id from cdc_meta
  union distinct select tx_id from cdc_events
  union distinct select tx_id from cdc_prev
),
cdc_starts as (
  select tx_id, min(ms) as start_ms from (
    select tx_id, ts_ms as ms from cdc_meta
    union all select tx_id, first_ms as ms from cdc_events
  ) as cdc_t
  group by tx_id
),
cdc_clock as (
  select max(ms) as now_ms from (
    select ts_ms as ms from cdc_meta
    union all select last_ms as ms from cdc_events
  ) as cdc_t
),
cdc_begin as (
  select tx_id, min(ts_ms) as begin_ms from cdc_meta where status = 'BEGIN' group by tx_id
),
cdc_end as (
  select tx_id, max(ts_ms) as end_ms from cdc_meta where status = 'END' group by tx_id
),
cdc_expected as (
  select tx_id, data_collection, max(n) as n
  from cdc_meta
  where status = 'END' and data_collection in {{ in_group }}
  group by tx_id, data_collection
),
cdc_counts as (
  select cdc_e.tx_id, sum(cdc_e.n) as expected,
    sum(case when coalesce(cdc_v.n, 0) < cdc_e.n then 1 else 0 end) as short
  from cdc_expected as cdc_e
  left join cdc_events as cdc_v
    on cdc_v.tx_id = cdc_e.tx_id and cdc_v.data_collection = cdc_e.data_collection
  group by cdc_e.tx_id
),
cdc_staged as (
  select tx_id, sum(n) as n from cdc_events group by tx_id
),
cdc_facts as (
  select cdc_i.tx_id, cdc_b.begin_ms, cdc_x.end_ms, cdc_s.start_ms,
    coalesce(cdc_c.expected, 0) as expected_events, coalesce(cdc_n.n, 0) as staged_events,
    (cdc_x.end_ms is not null and coalesce(cdc_c.short, 0) = 0) as complete,
    cdc_p.status as prev_status, cdc_p.settled_at as prev_settled_at,
    cdc_k.now_ms - cdc_s.start_ms as age_ms
  from cdc_ids as cdc_i
  left join cdc_begin as cdc_b on cdc_b.tx_id = cdc_i.tx_id
  left join cdc_end as cdc_x on cdc_x.tx_id = cdc_i.tx_id
  left join cdc_starts as cdc_s on cdc_s.tx_id = cdc_i.tx_id
  left join cdc_counts as cdc_c on cdc_c.tx_id = cdc_i.tx_id
  left join cdc_staged as cdc_n on cdc_n.tx_id = cdc_i.tx_id
  left join cdc_prev as cdc_p on cdc_p.tx_id = cdc_i.tx_id
  cross join cdc_clock as cdc_k
),
cdc_judged as (
  select cdc_f.*,
    case
      when prev_status in ('released', 'quarantined') then prev_status
      when not complete and age_ms > {{ quarantine_ms }} then 'quarantined'
    end as settled
  from cdc_facts as cdc_f
),
cdc_blocker as (
  select min(start_ms) as blocker_ms from cdc_judged where settled is null and not complete
),
cdc_status as (
  select cdc_j.*,
    coalesce(settled, case
      when complete and (cdc_w.blocker_ms is null or end_ms < cdc_w.blocker_ms) then 'released'
      else 'held' end) as new_status
  from cdc_judged as cdc_j
  cross join cdc_blocker as cdc_w
)
select
  cast(tx_id as {{ str }}) as {{ q('transaction_id') }},
  cast(new_status as {{ str }}) as {{ q('status') }},
  cast(begin_ms as {{ big }}) as {{ q('begin_ms') }},
  cast(end_ms as {{ big }}) as {{ q('end_ms') }},
  cast(start_ms as {{ big }}) as {{ q('start_ms') }},
  cast(expected_events as {{ big }}) as {{ q('expected_events') }},
  cast(staged_events as {{ big }}) as {{ q('staged_events') }},
  cast(case when new_status = 'held' then age_ms end as {{ big }}) as {{ q('held_ms') }},
  (new_status = 'held' and age_ms > {{ report_ms }}) as {{ q('overdue') }},
  cast(case
    when prev_status = new_status then prev_settled_at
    when new_status in ('released', 'quarantined') then {{ cdc.now_utc() }}
  end as {{ dbt.type_timestamp() }}) as {{ q('settled_at') }}
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

{#- The rows of a member the ledger released, or outside any transaction (cdc.unapplied). -#}
{% macro released_filter(alias, entity, ledger) %}
  {%- set q = adapter.quote -%}
  {%- set tx = alias ~ '.' ~ q(cdc.transaction_fields(entity).tx) -%}
  {{ return('(' ~ tx ~ ' is null or ' ~ tx ~ ' in (select cdc_ledger.' ~ q('transaction_id')
      ~ ' from ' ~ ledger ~ ' as cdc_ledger where cdc_ledger.' ~ q('status') ~ " = 'released'))") }}
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
