#!/usr/bin/env bash
# LiteLLM's proxy for the gateway end-to-end test (tests/e2e/test_litellm_gateway.py), in a venv
# of its own (var/gateway-venv, or $SRBENCH_GATEWAY_VENV) so that its ~110 dependencies never
# move a pin of the project's .venv. Every wheel is checked against its sha256 in
# requirements/gateway.txt (pip --require-hashes; --no-deps, so nothing unlisted comes in).
# Idempotent: does nothing while the venv matches the lock file. PYTHON is the project's
# interpreter (its base Python 3.12 makes the new venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
VENV="${SRBENCH_GATEWAY_VENV:-var/gateway-venv}"
LOCK=requirements/gateway.txt
want="$(sha256sum "$LOCK" | cut -c1-64)"

if [ -x "$VENV/bin/litellm" ] && [ "$(cat "$VENV/.lock-sha256" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
  --require-hashes --no-deps --only-binary :all: -r "$LOCK"
"$VENV/bin/python" -m pip check --disable-pip-version-check >/dev/null
echo "$want" >"$VENV/.lock-sha256"
echo "gateway ok: $("$VENV/bin/python" -c 'import importlib.metadata as m; print("litellm", m.version("litellm"))')"
