"""The Airflow DAG folder: thin TaskFlow wiring of the jobs in ``jobs/`` (no logic here)."""
