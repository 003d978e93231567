# clinrel: `make report` renders the embedded demo study, `make test` runs the suite.
# Both install into .venv first when needed (make install).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.clinrel-installed
REPORT_DIR ?= build/report
JOBS ?= 2

.PHONY: install report test test-all bench browser system-deps demo-data demo-metadata clean help

help:
	@echo "make report    install if needed, render the demo study into $(REPORT_DIR)/"
	@echo "make test      install if needed, run the test suite (slow tests excluded)"
	@echo "make test-all  the whole suite, coverage studies and fuzzing included"
	@echo "make bench     benchmarks at BenchX and CRS-Bench scale -> bench/results.json"
	@echo "make system-deps  (asked for explicitly) apt-get install chromium poppler-utils"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[runner,test]'
	@touch $(STAMP)

install: $(STAMP) browser

# Headless Chromium (browser test) and poppler (PDF pages) are system packages: make never
# installs them; it prints the command (the browser test is skipped without them).
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v pdftoppm >/dev/null 2>&1; then :; \
	else echo "note: chromium or pdftoppm not found; the browser test will be skipped."; \
	  echo "      To run it, install them yourself, e.g. on Debian/Ubuntu:"; \
	  echo "      sudo apt-get install chromium poppler-utils   (or: make system-deps)"; fi

# Only when asked for by name: installs the browser test's system packages with apt-get.
system-deps:
	@echo "running: apt-get update && apt-get install -y chromium poppler-utils"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium poppler-utils

report: install
	$(VENV)/bin/clinrel report --demo --strict --force --out $(REPORT_DIR)

test: install
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile -m "not slow"

test-all: install
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile -m "slow or not slow"

bench: install
	$(PY) bench/run.py

# Re-make the committed demo data with the networks of inference_runner (minutes, CPU).
demo-data: install
	$(VENV)/bin/clinrel demo --regenerate --force --out build/demo-regenerated
	cp build/demo-regenerated/cases.parquet build/demo-regenerated/runs.parquet \
	   build/demo-regenerated/probe_predictions.parquet build/demo-regenerated/run_manifest.json \
	   build/demo-regenerated/metadata.parquet build/demo-regenerated/lesions.parquet clinrel/demo_data/

# Re-make only the demo's metadata evidence table from the committed cases (seconds, no networks).
demo-metadata: install
	$(PY) -m inference_runner.metadata.demo clinrel/demo_data

clean:
	rm -rf build .pytest_cache
