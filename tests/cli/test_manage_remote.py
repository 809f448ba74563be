"""`manage.py benchmark VERB --url …` starts as the console script does (issue 38 item 3): a verb
that only talks to a server runs without booting Django, Celery or DRF, without httpx's own
command line, and prints what the Django path prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from tests import factories as f
from tests.cli.test_console_remote import django_path

ROOT = Path(__file__).resolve().parents[2]

# Runs manage.py's `main` and reports, at exit, which of the heavy modules were imported.
PROBE = """
import atexit, json, runpy, sys
atexit.register(lambda: print("MODULES " + json.dumps(sorted(
    m for m in ("django.apps", "django.conf", "celery", "rest_framework", "rich", "click")
    if m in sys.modules)), file=sys.stderr))
sys.argv = ["manage.py", *sys.argv[1:]]
runpy.run_path("manage.py", run_name="__main__")
"""


def manage(*args: str) -> tuple[int, str, str, list[str]]:
    hidden = ("DJANGO_SETTINGS_MODULE", "SRBENCH_URL", "SRBENCH_TOKEN", "SRBENCH_USER")
    environ = {k: v for k, v in os.environ.items() if k not in hidden}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.splitlines()
    probe = [line for line in lines if line.startswith("MODULES ")]
    assert probe, done.stderr
    err = "\n".join(line for line in lines if not line.startswith("MODULES "))
    return done.returncode, done.stdout, err, json.loads(probe[-1].removeprefix("MODULES "))


@pytest.mark.django_db(transaction=True)
def test_manage_py_remote_verbs_run_without_django(live_server, capsys) -> None:  # type: ignore[no-untyped-def]
    token, _ = Token.objects.get_or_create(user=f.user_create(username="ops", staff=True))
    f.target_create(slug="manage-t")
    connection = ["--url", live_server.url, "--token", token.key]
    for verb in (["targets"], ["targets", "--json"], ["runs", "--json"]):
        code, out, err, modules = manage("benchmark", *verb, *connection)
        assert (code, modules) == (0, []), (verb, err)
        assert (code, out) == django_path(capsys, *verb, *connection), verb
    # A refusal is the same one line and exit code; a usage error names manage.py's command.
    code, out, err, modules = manage("benchmark", "show", "999999", *connection)
    assert (code, out, modules) == (2, "", []) and err.startswith("error:")
    code, _out, err, _modules = manage("benchmark", "show", "--url", live_server.url)
    assert code == 2 and "manage.py benchmark show" in err


def test_manage_py_local_verbs_still_boot_django() -> None:
    code, _out, err, modules = manage("benchmark", "prepare", "--help")
    assert code == 0 and "django.apps" in modules, err
