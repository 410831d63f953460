"""PySpark jobs, one per pipeline step, each ``run(spark, settings) -> stats`` (see architecture.md)."""
