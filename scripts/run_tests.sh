#!/usr/bin/env bash
# make test: find (or start) PostgreSQL and Redis, run every test once on them, and stop
# whatever this script started, also when the tests fail. PYTHON is the venv's interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
services=$(PYTHON="$PYTHON" scripts/ensure_services.sh)
eval "$services"
stop_embedded() {
  if [ -n "${SRBENCH_EMBEDDED_PGDATA:-}" ]; then
    "$PYTHON" -m srbench.embedded_pg stop --pgdata "$SRBENCH_EMBEDDED_PGDATA" >&2 || true
  fi
}
trap stop_embedded EXIT
# --durations: the 25 slowest tests, so a creeping suite shows up in CI's log.
"$PYTHON" -m pytest -p no:cacheprovider --durations=25 "$@"
