"""`srbench … | head -1` (an outside probe, 2026-12-06): when the reader of the CLI's output
goes away after one line, the CLI stops quietly — exit status 141, as a shell reports a
command ended by SIGPIPE, and no traceback on stderr — through the console script and
`manage.py benchmark`, on the Django-free remote path and the Django path alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token

from tests import factories as f
from tests.conftest import ROOT, database_url_for_worker

pytestmark = pytest.mark.django_db(transaction=True)

SRBENCH = Path(sys.executable).with_name("srbench")


def child_env() -> dict[str, str]:
    hidden = ("SRBENCH_URL", "SRBENCH_TOKEN", "SRBENCH_USER")
    return {
        **{k: v for k, v in os.environ.items() if k not in hidden},
        "DJANGO_SETTINGS_MODULE": "srbench.settings_test",
        "DATABASE_URL": database_url_for_worker(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "SRBENCH_VAR_DIR": str(settings.VAR_DIR),
    }


def first_line_then_close(argv: list[str]) -> tuple[str, int, str]:
    """Run `argv` with its stdout read by a reader that closes the pipe after one line (as
    `| head -1` does): that line, the exit status, stderr."""
    process = subprocess.Popen(
        argv, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    line = process.stdout.readline().decode()
    process.stdout.close()
    err = process.stderr.read().decode()
    return line, process.wait(timeout=120), err


def test_a_reader_gone_after_one_line_ends_the_cli_quietly(live_server) -> None:  # type: ignore[no-untyped-def]
    ops = f.user_create(username="ops", staff=True)
    token, _ = Token.objects.get_or_create(user=ops)
    # Far more output than a pipe holds (64 KiB), so the CLI writes after the reader is gone.
    for n in range(400):
        f.target_create(
            slug=f"pipe-{n:03}", name="x" * 200, base_url=f"http://127.0.0.1:1/{'v' * 300}"
        )
    remote = ["--url", live_server.url, "--token", token.key]
    local = ["--user", "ops"]
    commands = {
        "srbench remote": [str(SRBENCH), "targets", "--json", *remote],
        "srbench django": [str(SRBENCH), "targets", "--json", *local],
        "manage.py remote": [
            sys.executable,
            "manage.py",
            "benchmark",
            "targets",
            "--json",
            *remote,
        ],
        "manage.py django": [sys.executable, "manage.py", "benchmark", "targets", "--json", *local],
        "srbench text": [str(SRBENCH), "targets", *remote],
    }
    for name, argv in commands.items():
        line, code, err = first_line_then_close(argv)
        assert line.strip() == "[" or line.startswith("pipe-000 "), (name, line)
        assert "Traceback" not in err and "BrokenPipeError" not in err, (name, err)
        assert code == 141 and err == "", (name, code, err)


def test_a_broken_pipe_of_anything_else_is_raised_as_before() -> None:
    """Only standard output's reader gone is quiet: a closed socket or child's pipe is an
    error, not a `| head`."""
    from srbench.cli.pipe import reader_gone_quietly

    def main() -> None:
        raise BrokenPipeError(32, "a socket's peer went away")

    with pytest.raises(BrokenPipeError):
        reader_gone_quietly(main)
