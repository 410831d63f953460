"""Long-running processes that connect the ledger to brokers and endpoints: AMQP 0.9.1, AMQP 1.0,
MQTT 3.1.1 and 5, HTTP push (``ackstore connect amqp|amqp10|mqtt|http-push``)."""
