"""Where the Ledger page is: its app's prefix on Airflow's api-server, and its route inside
Airflow's UI (``/plugin/ledger``). The plugin mounts them; ``ackstore airflow`` prints the URL."""

URL_PREFIX = "/ackstore/ledger"
LEDGER_ROUTE = "ledger"
