"""Running the `benchmark` management command in-process from a test: the one helper the
CLI-facing tests share (tests/cli/conftest.py's `bench` fixture runs it over both transports)."""

from __future__ import annotations

import pytest
from django.core.management import call_command


def bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`benchmark ARGS…` → (exit code, stdout, stderr); what the command printed before it
    exited is read off `capsys`, so call it with the test's own capsys."""
    code = 0
    try:
        call_command("benchmark", *args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
