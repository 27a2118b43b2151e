# The two commands: `make run` (main demo) and `make test` (the suite).
# Each creates .venv if it is missing and installs what it needs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.meshpar-run-installed
TEST_STAMP := $(VENV)/.meshpar-test-installed

.PHONY: run test bench clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(RUN_STAMP): setup.py | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): setup.py | $(PY)
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@ $(RUN_STAMP)

run: $(RUN_STAMP)
	$(PY) -m meshpar demo

# two test processes; the tests that start TF workers run one after another in
# one of them (tests/conftest.py: CLUSTER_MODULES)
test: $(TEST_STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup tests

bench: $(RUN_STAMP)
	$(PY) benchmarks/overhead.py

clean-venv:
	rm -rf $(VENV)
