"""What ackstore shows inside Airflow's UI: the Ledger page (``ledger_page``), its chart
(``chart``) and the plugin that mounts it (``plugin``)."""
