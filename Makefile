# One-line entry points. `make test` on a fresh machine: venv + deps + system packages + the real local
# stack's parts (installed by stack-prepare, started by the test session) + the whole suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: test unit lint demo demo-ui stack-prepare stack-up stack-celery stack-down system-deps clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -e ".[dev]"
	touch $@

system-deps:
	@# Chromium renders the HTML report and the Airflow UI in screenshot tests (at /usr/bin/chromium, where
	@# tests/browser.py looks); Java runs Flink; PostgreSQL and Redis are the distributed Airflow's metadata DB and
	@# Celery broker (stack-celery, tests/integration/test_celery_gate.py). Installed when run as root (one
	@# apt-get update for all); missing any fails the target, as it fails those tests: a run without them is not green.
	@missing=""; \
	  test -x /usr/bin/chromium || missing="$$missing chromium"; \
	  command -v java >/dev/null 2>&1 || missing="$$missing openjdk-17-jdk-headless"; \
	  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	  command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	  if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi; \
	  test -x /usr/bin/chromium || { echo "chromium missing at /usr/bin/chromium and not installed (run as root, or: sudo apt-get install chromium)" >&2; exit 1; }; \
	  command -v java >/dev/null 2>&1 || { echo "java missing and not installed (run as root, or: sudo apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }; \
	  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { echo "PostgreSQL missing and not installed (run as root, or: sudo apt-get install postgresql)" >&2; exit 1; }; \
	  command -v redis-server >/dev/null 2>&1 || { echo "redis-server missing and not installed (run as root, or: sudo apt-get install redis-server)" >&2; exit 1; }

test: $(BIN)/.installed system-deps stack-prepare
	@# tests/suite.py: the unit tests on two workers while the stack starts, then the integration tests on it; a
	@# run that collected no test at all fails. Lint runs too (after the tests, so one run shows both) and a lint
	@# error fails the target.
	$(BIN)/python -m tests.suite $(PYTEST_ARGS); rc=$$?; \
	  $(MAKE) --no-print-directory lint || { [ $$rc -ne 0 ] || rc=1; }; exit $$rc

unit: $(BIN)/.installed
	@# on two workers (pytest-xdist)
	$(BIN)/python -m pytest -m unit -n 2 $(PYTEST_ARGS)

lint: $(BIN)/.installed
	@# ruff over the whole tree; mypy over the package (tests and benchmarks are not type-checked)
	$(BIN)/ruff check .
	$(BIN)/mypy airflow_flink_replay

demo: $(BIN)/.installed system-deps
	$(BIN)/flink-replay demo

demo-ui: $(BIN)/.installed
	$(BIN)/flink-replay demo --ui

stack-prepare: $(BIN)/.installed
	@# The stack's parts (the Flink-side venv, tansu, the Kafka connector): minutes on a fresh machine, installed
	@# here with the rest rather than by the first `stack up` inside the test session.
	$(BIN)/flink-replay stack prepare

stack-up: $(BIN)/.installed
	$(BIN)/flink-replay stack up

stack-celery: $(BIN)/.installed
	@# The stack plus a distributed Airflow beside it: CeleryExecutor, PostgreSQL, Redis and two workers that act as
	@# hosts of their own (PostgreSQL and Redis from the machine's packages: make system-deps). stack-down stops all.
	$(BIN)/flink-replay stack up --airflow celery

stack-down: $(BIN)/.installed
	$(BIN)/flink-replay stack down

clean:
	-$(BIN)/flink-replay stack down
	rm -rf $(VENV) .stack
