# Two commands from a fresh clone: `make demo` (ingest the bundled runs, print stats) and
# `make test`. Both create .venv on first use with Python >= 3.12 (pyenv's if present).
PYTHON ?= $(shell for p in $$(command -v python3.12 python3.13 python3) \
	$$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python3 2>/dev/null); do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
DEMO_LAKE ?= lake
DEMO_REPORT ?= $(DEMO_LAKE)/report.html

.PHONY: help setup system-deps demo test test-fast lint typecheck bench screenshot lock clean
# A recipe that fails part-way (the venv installed, its byte-compiling not) leaves no target behind
# for the next `make` to take as done.
.DELETE_ON_ERROR:

help:
	@echo "make demo   ingest fixtures/harbor into ./lake, print stats and a query, write the report"
	@echo "make test   install and run the test suite (make test-fast: without the slow tests)"
	@echo "make lint   ruff check, ruff format --check, sqlfluff over sql/"
	@echo "make typecheck  mypy over the package, the benchmarks and the reference implementations"
	@echo "make bench  benchmarks (ratios against anchors measured in the same run)"
	@echo "make lock   renew constraints.txt (the versions .venv installs) to the newest allowed"

EXTRAS := dev,tinker,harbor,report,spark

# .venv gets the versions the tests last passed with (constraints.txt), so a fresh clone installs
# what main was checked with, not whatever the registry holds that day; `make lock` renews them.
$(BIN)/wmo-lake: pyproject.toml constraints.txt
	@test -n "$(PYTHON)" || { echo "need Python >= 3.12 (python3.12 / python3.13 on PATH)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[$(EXTRAS)]'
	@# byte-compiled as a wheel install would be (an editable install is not)
	$(BIN)/python -m compileall -q wmo_lake
	@touch $@

setup: $(BIN)/wmo-lake

demo: setup
	@# no rm: re-ingesting is idempotent, and ./lake may hold your own batches too
	$(BIN)/wmo-lake ingest fixtures/harbor --lake $(DEMO_LAKE)
	$(BIN)/wmo-lake stats --lake $(DEMO_LAKE)
	$(BIN)/wmo-lake sql --lake $(DEMO_LAKE) \
		"SELECT batch, trial_name, task_id, reward, passed, stop_reason, n_spans FROM trial_records ORDER BY batch, trial_name"
	$(BIN)/wmo-lake report --lake $(DEMO_LAKE) --out $(DEMO_REPORT)
	@echo "report: $(DEMO_REPORT) (open it in a browser; it needs no network)"
	@echo ""
	@echo "The demo lake is ./lake (the default --lake). Put wmo-lake on your PATH and ask it:"
	@echo "  source .venv/bin/activate    # or: export PATH=\"$$PWD/.venv/bin:\$$PATH\""
	@echo "  wmo-lake stats; wmo-lake tables; wmo-lake sql \"FROM rollout_stats\""

# What CI runs (.ci/run): the system packages the tests need (installed when missing, as root),
# the linters, the type check, then every test.
test: system-deps setup lint typecheck
	$(BIN)/python -m pytest -q

system-deps:
	@.ci/system-deps

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

# The README's picture of the report, written by the browser test (needs chromium).
screenshot: setup
	WMO_LAKE_SCREENSHOT=$(CURDIR)/docs/report.png $(BIN)/python -m pytest -q \
		tests/test_report_browser.py -k renders_offline

lint: setup
	$(BIN)/ruff check wmo_lake tests bench reference
	$(BIN)/ruff format --check wmo_lake tests bench reference
	$(BIN)/sqlfluff lint sql
	$(BIN)/python -m wmo_lake.portable

typecheck: setup
	$(BIN)/mypy

bench: setup
	$(BIN)/python -m bench

# The newest versions pyproject.toml allows, resolved in a throwaway venv and written to
# constraints.txt; then `make test` on them before committing the file.
lock:
	@test -n "$(PYTHON)" || { echo "need Python >= 3.12 (python3.12 / python3.13 on PATH)"; exit 2; }
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q --upgrade pip
	.lock-venv/bin/pip install -q -e '.[$(EXTRAS)]'
	{ sed -n '/^#/p' constraints.txt; .lock-venv/bin/pip freeze --exclude-editable; } > constraints.new
	mv constraints.new constraints.txt && rm -rf .lock-venv
	@echo "constraints.txt renewed: run make test (it reinstalls .venv) before committing it"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
