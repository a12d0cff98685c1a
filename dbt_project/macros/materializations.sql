{#- PostgreSQL: views built under a lock per view, so that two builds at once both succeed,
    and left as they are when they would come out the same
    (macros/apply/postgres.sql in the cdc package). dbt uses a package's version of one of its
    own materializations only when the root project forwards to it, as here. -#}
{% materialization view, adapter='postgres' %}
  {{ return(cdc.materialization_view_postgres()) }}
{% endmaterialization %}

{#- Spark: a view whose SQL and columns did not change is left as it is (macros/common/spark_views.sql). -#}
{% materialization view, adapter='spark' %}
  {{ return(cdc.materialization_view_spark()) }}
{% endmaterialization %}
