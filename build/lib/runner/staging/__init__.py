"""Staging: read Files with Spark, validate against the declaration, write the staging relation."""
