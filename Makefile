# TideMQ developer entry points. Every target creates .venv on first use.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint unit bench clean-venv java browser

$(STAMP): pyproject.toml setup.py src/tidemq/formats/_crecords.c
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,spark]'
	@touch $(STAMP)

## run: start the standalone server (name server, broker, web console on :8080) on ./data
run: $(STAMP)
	$(BIN)/tidemq standalone --data ./data

## lint: ruff, mypy strict on src/, import-linter layer contracts
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/lint-imports

## java: Spark (the tidemq data source and its tests) needs a Java 17 runtime
java:
	@command -v java >/dev/null 2>&1 || { echo "error: Java 17 is required for the Spark tests."; \
	  echo "  Debian: apt-get install -y openjdk-17-jre-headless"; exit 1; }
	@java -version 2>&1 | head -1 | grep -Eq '"(17|21)[."]' || { echo "error: Spark 4 needs Java 17 or 21;" \
	  "found: $$(java -version 2>&1 | head -1)"; exit 1; }

## browser: Debian's chromium for the console's end-to-end tests (they skip without it);
## installed once, only where apt-get can (as root); never fatal
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
	  [ "$$(id -u)" = 0 ] && { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; } || \
	  echo "note: chromium is not installed; the console browser tests will be skipped"

## unit: the pytest suite only (exit code 5, no tests collected, fails)
unit: $(STAMP) java browser
	$(BIN)/python -m pytest -q -p no:cacheprovider

## test: lint, then the whole test suite
test: lint unit

## bench: the store and broker benchmarks, JSON under benchmarks/results/
bench: $(STAMP)
	$(BIN)/tidemq bench store --json benchmarks/results/store.json

clean-venv:
	rm -rf $(VENV)
