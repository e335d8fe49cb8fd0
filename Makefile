# One-line entry points. `make test` on a fresh machine: venv + deps + system packages + the real local
# stack's parts (installed by stack-prepare, started by the test session) + the whole suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: test unit lint demo demo-ui stack-prepare stack-up stack-down system-deps clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -e ".[dev]"
	touch $@

system-deps:
	@# Chromium renders the HTML report and the Airflow UI in screenshot tests (at /usr/bin/chromium, where
	@# tests/browser.py looks); Java runs Flink. Installed when run as root; missing either fails the target,
	@# as it fails those tests: a run without them is not green.
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi; \
	  test -x /usr/bin/chromium || { echo "chromium missing at /usr/bin/chromium and not installed (run as root, or: sudo apt-get install chromium)" >&2; exit 1; }; }
	@command -v java >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null; fi; \
	  command -v java >/dev/null 2>&1 || { echo "java missing and not installed (run as root, or: sudo apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }; }

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

stack-down: $(BIN)/.installed
	$(BIN)/flink-replay stack down

clean:
	-$(BIN)/flink-replay stack down
	rm -rf $(VENV) .stack
