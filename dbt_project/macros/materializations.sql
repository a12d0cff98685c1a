{#- PostgreSQL: views built under a lock per view, so that two builds at once both succeed
    (macros/apply/postgres.sql in the cdc package). dbt uses a package's version of one of its
    own materializations only when the root project forwards to it, as here. -#}
{% materialization view, adapter='postgres' %}
  {{ return(cdc.materialization_view_postgres()) }}
{% endmaterialization %}
