"""Long-running processes that connect the ledger to upstream sources (AMQP 0.9.1 first)."""
