# TideMQ developer entry points. Every target creates .venv on first use.
# Another interpreter in a venv of its own: make test PYTHON=python3.12 VENV=.venv-3.12
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint unit bench clean-venv java browser cppclient

$(STAMP): pyproject.toml setup.py src/tidemq/formats/_crecords.c
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 (or give PYTHON=python3.12, 3.13)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-compile --upgrade pip
	$(BIN)/python -m pip install -q --no-compile -e '.[dev,spark]'
	$(BIN)/python -m compileall -q -j 0 -x '/tests/' $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
	@touch $(STAMP)

## run: start the standalone server (name server, broker, web console on :8080) on ./data,
## listening on 127.0.0.1 (HOST=0.0.0.0 opens every port to the network, with no access control;
## the console then needs users: RUN_ARGS="--console-users console-users.yml"). The package is
## compiled to bytecode first (only what changed since): the install is editable, and where
## PYTHONDONTWRITEBYTECODE is set every process would otherwise compile what it imports at
## each start
HOST ?= 127.0.0.1
RUN_ARGS ?=
run: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 src
	$(BIN)/tidemq standalone --data ./data --host $(HOST) $(RUN_ARGS)

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

## browser: Debian's chromium for the console's end-to-end tests; installed once with
## apt-get where that is possible (root), otherwise the run stops and says what to install
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
	  [ "$$(id -u)" = 0 ] && { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; } || true
	@command -v chromium >/dev/null 2>&1 || { echo "error: chromium is required for the" \
	  "console's browser tests; as root: apt-get install -y chromium"; exit 1; }

## cppclient: the RocketMQ C++ client (PyPI rocketmq 0.4.4, in the dev extra, bundles
## librocketmq) that the compatibility tests drive; it must load, or the run stops
cppclient: $(STAMP)
	@$(BIN)/python -c 'import rocketmq.client' 2>/dev/null || { echo "error: the RocketMQ" \
	  "C++ client does not load: $$($(BIN)/python -c 'import rocketmq.client' 2>&1 | tail -1)"; \
	  echo "  it comes with '.[dev]' (rocketmq==0.4.4, Linux x86_64 only):" \
	  "$(BIN)/python -m pip install -e '.[dev,spark]'"; exit 1; }

## unit: the pytest suite only, in JOBS parallel workers (pytest-xdist; a module's tests and
## all Spark tests each stay on one worker), listing its 15 slowest tests (exit code 5, no
## tests collected, fails). Three workers on a machine of two cores: the tests spend most of
## their time waiting on the processes they start (servers, kill -9 cycles, a JVM), and two
## workers leave the cores idle for much of the run. Under CI=true a skipped test fails the
## run unless tests/conftest.py allows its reason. The package is compiled to bytecode
## first: the tests start many server and client processes, and where
## PYTHONDONTWRITEBYTECODE is set each of them would compile the package again. The tests'
## files (pytest's tmp_path, and TMPDIR for what the tests and their processes make) live in
## a fresh directory under TEST_TMP, removed after the run: by default the machine's tmpfs,
## /dev/shm, which spares the suite the disk's flushes (kill -9 keeps what the page cache
## holds on either), when it has TMPFS_MIB free and the machine as much memory available (a
## tmpfs's files are memory: the brokers under test preallocate 1 GiB segments); otherwise
## /tmp, saying why. TEST_TMP=/tmp runs them on the disk. Tests of a disk's page cache take
## a directory under /var/tmp (TEST_DISK_TMP) either way: disk_path in tests/conftest.py
JOBS ?= 3
TEST_TMP ?=
TMPFS_MIB ?= 12288
unit: $(STAMP) java browser cppclient
	$(BIN)/python -m compileall -q -j 0 src
	@base='$(TEST_TMP)'; if [ -z "$$base" ]; then base=/tmp; \
	  shm=$$(df -Pm /dev/shm 2>/dev/null | awk 'NR == 2 { print $$4 }'); \
	  mem=$$(awk '/^MemAvailable:/ { print int($$2 / 1024) }' /proc/meminfo); \
	  if [ -z "$$shm" ] || [ ! -w /dev/shm ]; then \
	    echo "make unit: no writable /dev/shm: the tests' files go to /tmp (disk)"; \
	  elif [ "$$shm" -lt $(TMPFS_MIB) ] || [ "$$mem" -lt $(TMPFS_MIB) ]; then \
	    echo "make unit: /dev/shm has $$shm MiB free and the machine $$mem MiB of memory" \
	      "available, under the $(TMPFS_MIB) MiB the run may hold: the tests' files go to" \
	      "/tmp (disk)"; \
	  else base=/dev/shm; fi; fi; \
	tmp=$$(mktemp -d "$$base/tidemq-tests.XXXXXX") && trap 'rm -rf "$$tmp"' EXIT INT TERM && \
	echo "make unit: the tests' files under $$tmp" && \
	TMPDIR=$$tmp $(BIN)/python -m pytest -q -p no:cacheprovider -n $(JOBS) --dist loadgroup \
	  --durations=15 --basetemp=$$tmp/pytest

## test: lint and the whole test suite; lint runs beside the tests (it is single-threaded
## and the tests leave CPU idle) and prints its output in one block when it ends; the run
## fails if either fails
test: $(STAMP)
	@log=$$(mktemp) && trap 'rm -f "$$log"' EXIT INT TERM; \
	{ $(MAKE) --no-print-directory lint >"$$log" 2>&1; rc=$$?; \
	  echo; echo "---- make lint: exit $$rc ----"; cat "$$log"; echo "---- end of make lint ----"; \
	  exit $$rc; } & lint=$$!; \
	$(MAKE) --no-print-directory unit; unit_rc=$$?; \
	wait $$lint; lint_rc=$$?; \
	if [ $$lint_rc -ne 0 ]; then echo "make test: lint failed (exit $$lint_rc)"; fi; \
	if [ $$unit_rc -ne 0 ]; then echo "make test: the tests failed (exit $$unit_rc)"; fi; \
	[ $$lint_rc -eq 0 ] && [ $$unit_rc -eq 0 ]

## bench: the store and broker benchmarks, JSON under benchmarks/results/
bench: $(STAMP)
	$(BIN)/tidemq bench store --json benchmarks/results/store.json

clean-venv:
	rm -rf $(VENV)
