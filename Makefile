# Two commands for a newcomer: `make setup` then `make demo`; `make test` runs the suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# What running needs (make setup), and what the tests and the other destinations add (make test).
EXTRAS := s3
ALL_EXTRAS := dev,bigquery,databricks,s3,azure

.PHONY: setup test-tools bq-install jdbc-driver prometheus azurite demo demo-s3 test test-fast test-record lint format bench bench-quick bq-up bq-down s3-up s3-down clean help docs

help:
	@echo "make setup  - .venv with what running needs, ./profiles.yml, the jars, the Spark class archive, dbt deps"
	@echo "make test-tools - what only the tests add (every extra, Prometheus, Azurite, the BigQuery emulator); make test runs it"
	@echo "make demo   - the main job on the embedded Spark + Iceberg default"
	@echo "make test   - the whole test suite (needs Java 17+ and PostgreSQL on 127.0.0.1:5432)"
	@echo "make test-fast - the tests that need no Java and no server (declarations, render, CLI, Audit DB on SQLite)"
	@echo "make test-record - make test, then each test's seconds into tests/durations.json (docs/testing.md)"
	@echo "make bq-up  - start the local BigQuery emulator on 127.0.0.1:19050 (bq-down stops it)"
	@echo "make s3-up  - start a local S3 API (moto) on 127.0.0.1:4566 (s3-down stops it)"
	@echo "make demo-s3 - the demo with its landing root in a bucket of the local S3 API"
	@echo "make lint   - ruff and mypy"
	@echo "make bench  - benchmarks as side-by-side ratios, docs/performance.md table rewritten (about 6 h; not part of make test)"
	@echo "make docs   - the documentation site (README and docs/) built into site/"
	@echo "make bench-quick - the same harness on small data (a few minutes; bench/results/quick.json)"
	@echo "make clean  - remove local state (.cdc/, jars/, dbt target/)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# pip's own chatter (setuptools' editable-install warning) goes to .venv/pip.log unless it fails.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@echo "installing the project into $(VENV) (usually 1 to 2 minutes; pip log: $(VENV)/pip.log)"
	@$(BIN)/pip install --quiet -e '.[$(EXTRAS)]' > $(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	@touch $@

# Every extra: the test tools, BigQuery's and Databricks' adapters, ADLS (make test, lint, docs).
$(VENV)/.installed-all: pyproject.toml $(VENV)/.installed
	@echo "installing the tests' tools and every destination's adapter into $(VENV), once (usually 1 to 3 minutes; pip log: $(VENV)/pip.log)"
	@$(BIN)/pip install --quiet -e '.[$(ALL_EXTRAS)]' > $(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	@touch $@

# `apt-get install` of $(1) (packages and options), waiting for another apt's lock; when the
# package lists are too old to have it, updated once and tried again.
APT := apt-get -o DPkg::Lock::Timeout=600
apt_install = $(APT) install -y -q $(1) >/dev/null 2>&1 || \
  { $(APT) update -q >/dev/null 2>&1 && $(APT) install -y -q $(1) >/dev/null; }

# Prometheus (Debian's package): the tests scrape a watch's metrics with a real server and check
# docs/monitoring/cdc-alerts.yml with promtool. Installed when missing and we may; otherwise
# said, and setup goes on (the runner does not need it).
prometheus:
	@if command -v prometheus >/dev/null && command -v promtool >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's prometheus (the metrics tests' server and promtool)"; \
	  exec 9>/tmp/cdc-prometheus.lock; flock -w 900 9 || true; \
	  command -v prometheus >/dev/null && exit 0; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $(call apt_install,--no-install-recommends prometheus); \
	else \
	  echo "Prometheus is missing (the tests need it): sudo apt-get install -y prometheus"; \
	fi

# Azurite (npm), Azure's storage emulator: the tests list, hash and stage Files of an abfss://
# landing root on it (docs/landing.md). Into .venv/azurite with the machine's npm; without npm,
# said, and setup goes on (the runner does not need it).
AZURITE := $(VENV)/azurite/node_modules/.bin/azurite-blob
azurite: $(AZURITE)

$(AZURITE): | $(BIN)/python
	@if command -v npm >/dev/null; then \
	  echo "installing Azurite from npm into $(VENV)/azurite (the abfss:// tests' storage)"; \
	  npm install --silent --no-audit --no-fund --prefix $(VENV)/azurite azurite@3.37.0 >/dev/null; \
	else \
	  echo "Azurite is missing (the tests need it): install Node.js and npm, then make setup"; \
	fi

# The embedded default's Spark catalog lives in PostgreSQL: Spark needs its JDBC driver, from
# Debian's libpostgresql-jdbc-java (installed here when missing and we may; two setups at once
# take turns, and apt waits for another apt's lock), or a postgresql.jar you put in jars/.
JDBC_JAR := /usr/share/java/postgresql.jar

jdbc-driver:
	@if [ -e $(JDBC_JAR) ] || [ -e jars/postgresql.jar ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's libpostgresql-jdbc-java (the Spark catalog's JDBC driver)"; \
	  exec 9>/tmp/cdc-jdbc-driver.lock; flock -w 900 9 || true; \
	  [ -e $(JDBC_JAR) ] && exit 0; \
	  $(call apt_install,libpostgresql-jdbc-java); \
	else \
	  echo "PostgreSQL's JDBC driver is missing: sudo apt-get install -y libpostgresql-jdbc-java, or copy postgresql.jar into jars/"; \
	  exit 1; \
	fi

# The runner's own modules byte-compiled, as pip does for an installed package: a short command
# (a run with nothing new) then does not compile them each time, also where
# PYTHONDONTWRITEBYTECODE keeps Python from writing them itself. `dbt deps` runs again only when
# packages.yml or the installed environment is newer than its last run, or the package link
# (dbt_packages/cdc -> ../macros: edited macros need no deps) is gone (`make clean`, `dbt clean`).
DEPS_DONE := $(VENV)/.dbt-deps
setup: $(VENV)/.installed jdbc-driver
	@$(BIN)/python -m compileall -q runner audit > /dev/null
	@$(BIN)/runner init
	@if [ -e dbt_project/dbt_packages/cdc ] && [ $(DEPS_DONE) -nt dbt_project/packages.yml ] \
	  && [ $(DEPS_DONE) -nt $(VENV)/.installed ]; then :; else \
	  cd dbt_project && ../$(BIN)/dbt deps --quiet && touch ../$(DEPS_DONE); fi
	@echo "setup done: next, 'make demo' or 'make test'"

# What only the tests use: every extra, Prometheus, Azurite and the BigQuery emulator.
test-tools: $(VENV)/.installed-all prometheus azurite bq-install

# The local BigQuery emulator's own environment (.venv-bq).
bq-install: $(VENV)/.installed
	@$(BIN)/python tools/bq_emulator.py install

# One screen: the run's summary per entity, then the transaction group's state.
demo: setup
	@$(BIN)/runner run --landing landing
	@$(BIN)/runner status

# Two workers (pytest-xdist), each with its own SparkSession; TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2

test: setup test-tools
	$(BIN)/pytest -n $(TEST_WORKERS) --dist load --maxschedchunk 1

# The same, then each test's seconds into tests/durations.json (the slowest-first order and the
# suite's ceiling: docs/testing.md).
test-record: setup test-tools
	CDC_TEST_RECORD=1 $(BIN)/pytest -n $(TEST_WORKERS) --dist load --maxschedchunk 1

# The fast tier (tests/conftest.py marks it): no Java, no PostgreSQL, no emulator. Both are made
# unreachable here, so a test that needs one and is not marked fails instead of passing.
test-fast: $(VENV)/.installed-all
	CDC_TEST_TIER=fast JAVA_HOME=/nonexistent CDC_PG_PORT=1 \
	  CDC_TEST_PG_URL=postgresql+psycopg2://postgres@127.0.0.1:1/test \
	  $(BIN)/pytest -m fast -n $(TEST_WORKERS) --dist load --maxschedchunk 1

# The local BigQuery emulator the bigquery target points at by default (own venv: .venv-bq).
bq-up: setup $(VENV)/.installed-all bq-install
	$(BIN)/python tools/bq_emulator.py up

bq-down:
	$(BIN)/python tools/bq_emulator.py down

# A local S3 API (moto's server) for the S3 landing demo (docs/landing.md).
s3-up: setup $(VENV)/.installed-all
	$(BIN)/python tools/s3_local.py up

s3-down:
	$(BIN)/python tools/s3_local.py down

# The demo with the sample Files in a bucket: the same tables as `make demo`. Credentials from
# the AWS environment as on AWS (the local API takes any); the endpoint is the local one.
S3_ENV := AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION=us-east-1

demo-s3: s3-up
	@$(S3_ENV) $(BIN)/python tools/s3_local.py upload
	@$(S3_ENV) $(BIN)/runner run --landing s3://landing
	@$(BIN)/runner status

# Not part of `make test`: ratios against a baseline in one run, written to bench/results/latest.json.
bench: setup
	$(BIN)/python bench/run.py --repeat 3

bench-quick: setup
	$(BIN)/python bench/run.py --quick --repeat 1 --out bench/results/quick.json

lint: setup $(VENV)/.installed-all
	$(BIN)/ruff check runner audit tests bench tools
	$(BIN)/mypy

# The documentation site (mkdocs.yml): README.md is its home page, docs/ the rest.
docs: $(VENV)/.installed-all
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

format:
	$(BIN)/ruff format runner audit tests
	$(BIN)/ruff check --fix runner audit tests

clean:
	-$(BIN)/runner drop-catalog --yes
	rm -rf .cdc jars site dbt_project/target dbt_project/logs dbt_project/dbt_packages logs bench/work bench/work_memory bench/work_processes bench/work_latency
