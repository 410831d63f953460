-- Run once by the postgres image on an empty data directory: the ledger and Airflow's
-- metadata, each in its own database with its own role.
CREATE ROLE ackstore LOGIN PASSWORD 'ackstore';
CREATE DATABASE ackstore OWNER ackstore;
CREATE ROLE airflow LOGIN PASSWORD 'airflow';
CREATE DATABASE airflow OWNER airflow;
