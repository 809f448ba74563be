#!/usr/bin/env bash
# sr-bench 1.0 (`vllm-sr` 0.4.0, its `benchmark` verbs) for bench/side_by_side.py, in a venv of
# its own (var/srbench1-venv, or $SRBENCH1_VENV) so that its dependencies never move a pin of the
# project's .venv. Every wheel is checked against its sha256 in requirements/srbench1.txt (pip
# --require-hashes; --no-deps, so nothing unlisted comes in). Idempotent: does nothing while the
# venv matches the lock file. PYTHON is the project's interpreter (its base Python makes the new
# venv). Exits non-zero, saying why, when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
VENV="${SRBENCH1_VENV:-var/srbench1-venv}"
LOCK=requirements/srbench1.txt
want="$(sha256sum "$LOCK" | cut -c1-64)"
fail() { echo "ensure_srbench1: $*" >&2; exit 1; }
trap 'fail "failed at line $LINENO (exit $?); $VENV left incomplete"' ERR

if [ -x "$VENV/bin/vllm-sr" ] && [ "$(cat "$VENV/.lock-sha256" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
[ -x "$PYTHON" ] || command -v "$PYTHON" >/dev/null || fail "no interpreter $PYTHON"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
  --require-hashes --no-deps --only-binary :all: -r "$LOCK"
"$VENV/bin/python" -m pip check --disable-pip-version-check >/dev/null
"$VENV/bin/vllm-sr" benchmark --help >/dev/null || fail "vllm-sr benchmark --help failed"
echo "$want" >"$VENV/.lock-sha256"
echo "srbench1 ok: $("$VENV/bin/python" -c 'import importlib.metadata as m; print("vllm-sr", m.version("vllm-sr"))')"
