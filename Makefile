# clinrel: `make report` renders the embedded demo study, `make test` runs the suite.
# Both install into .venv first when needed (make install).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.clinrel-installed
REPORT_DIR ?= build/report
JOBS ?= 2

.PHONY: install report test test-all bench browser demo-data clean help

help:
	@echo "make report    install if needed, render the demo study into $(REPORT_DIR)/"
	@echo "make test      install if needed, run the test suite (slow tests excluded)"
	@echo "make test-all  the whole suite, coverage studies and fuzzing included"
	@echo "make bench     benchmarks at BenchX and CRS-Bench scale -> bench/results.json"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

install: $(STAMP) browser

# Headless Chromium (browser test) and poppler (PDF pages) come from Debian's packages.
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v pdftoppm >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium and poppler-utils (Debian packages)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium poppler-utils >/dev/null) \
	    || echo "warning: could not install chromium; the browser test will be skipped"; \
	else echo "note: chromium not found and not root; the browser test will be skipped"; fi

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
	   build/demo-regenerated/probe_predictions.parquet build/demo-regenerated/run_manifest.json clinrel/demo_data/

clean:
	rm -rf build .pytest_cache
