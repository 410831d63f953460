"""The reports as one registry (``registry``: each report one object) and how they are shown: the
terminal's tables (``terminal``), the table model the Ledger page shares with them (``tables``),
values and stored text as every surface shows them (``shown_values``, ``shown_text``), and what a
report is asked for (``asked``). The CLI, the demo and the page (ackstore.ui) read reports here;
nothing here imports them."""
