# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON_VENV := .venv/bin/python

.PHONY: demo test test-unit fuzz bench bench-history airflow lock clean

demo:  ## install, create the ledger, submit sample signals, run the DAG once through Airflow, print the report
	scripts/bootstrap.sh
	.venv/bin/ackstore demo

airflow:  ## Airflow (UI on 127.0.0.1:8080) with the DAG and a Spark Connect server, until Ctrl-C
	scripts/bootstrap.sh
	.venv/bin/ackstore airflow

test:  ## install, make sure PostgreSQL and RabbitMQ run and Mosquitto is installed, check the import layers, run the whole test suite
	scripts/bootstrap.sh
	scripts/ensure-postgres.sh
	scripts/ensure-rabbitmq.sh
	scripts/ensure-mosquitto.sh
	.venv/bin/lint-imports
	$(PYTHON_VENV) -m pytest -n 2 --dist loadfile --durations=25

test-unit:  ## the loop for people: tests/unit, pure Python (no PostgreSQL, broker or Spark), in seconds
	test -x $(PYTHON_VENV) || scripts/bootstrap.sh
	$(PYTHON_VENV) -m pytest tests/unit -q

fuzz:  ## every entry that takes user text, on 100 000 generated cases each (FUZZ_EXAMPLES=…); about an hour
	scripts/bootstrap.sh
	scripts/ensure-postgres.sh
	ACKSTORE_FUZZ_EXAMPLES=$(or $(FUZZ_EXAMPLES),100000) $(PYTHON_VENV) -m pytest tests/ledger/test_fuzz.py \
		--hypothesis-show-statistics -q

bench:  ## the pipeline against a raw-SQL baseline, 100 000 commands (COMMANDS=1000000 for more)
	scripts/bootstrap.sh
	scripts/ensure-postgres.sh
	$(PYTHON_VENV) -m benchmarks.pipeline --commands $(or $(COMMANDS),100000)

bench-history:  ## a run's cost with 1 000 000 decided requests in the ledger vs an empty one (HISTORY=…)
	scripts/bootstrap.sh
	scripts/ensure-postgres.sh
	$(PYTHON_VENV) -m benchmarks.history --history $(or $(HISTORY),1000000)

lock:  ## rewrite constraints.txt from a fresh install
	rm -rf .venv-lock && python3 -m venv .venv-lock
	.venv-lock/bin/pip install -q '.[dev]'
	{ echo "# Reproducible install: pip install -c constraints.txt -e '.[dev]'"; \
	  echo "# Regenerate with: make lock"; \
	  .venv-lock/bin/pip freeze --exclude-editable | grep -v '^ackstore'; } > constraints.txt
	rm -rf .venv-lock

clean:
	rm -rf .venv .ackstore
