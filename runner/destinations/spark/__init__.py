"""The Spark destination (the embedded default: Spark + Iceberg on this machine, or a Spark
cluster): the destination itself (``destination``), the one place a SparkSession is built, for
every destination's staging and for dbt run in-process (``session``), the embedded default's
Iceberg JDBC catalog in PostgreSQL (``catalog``), and Spark's logging settings
(``log4j2.properties``). Kept light: ``runner.destinations.base`` imports ``session``.
"""
