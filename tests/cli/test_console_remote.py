"""The `srbench` console script's remote path (issue 25: the user's path through the CLI).

With a server (`--url`) a verb that only talks HTTP runs without booting Django or Celery — the
same parsers and handlers as `manage.py benchmark`, a fraction of the start-up — and prints
exactly what the Django path prints. The follow loop of `run` polls every `--poll` far from the
run's end and every FOLLOW_NEAR_END_POLL near it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from srbench.api_client import FOLLOW_NEAR_END_POLL, RunFollower
from srbench.cli.remote import HTTP_VERB_MODULES, remote_main, remote_requested
from tests import factories as f
from tests.conftest import purge_broker
from tests.runs import engine_support as es

ROOT = Path(__file__).resolve().parents[2]

# Runs the console script's `main` and reports, at exit, which of Django's and Celery's
# modules the process imported.
PROBE = """
import atexit, json, sys
atexit.register(lambda: print("MODULES " + json.dumps(sorted(
    m for m in ("django.apps", "django.db.models", "django.conf", "celery", "rest_framework")
    if m in sys.modules)), file=sys.stderr))
sys.argv = ["srbench", *sys.argv[1:]]
from srbench.cli.entry import main
main()
"""


def console(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str, list[str]]:
    """`srbench ARGS` in a fresh interpreter with no Django settings in its environment:
    exit code, stdout, stderr without the probe line, the probed modules."""
    hidden = ("DJANGO_SETTINGS_MODULE", "SRBENCH_URL", "SRBENCH_TOKEN", "SRBENCH_USER")
    environ = {k: v for k, v in os.environ.items() if k not in hidden}
    environ.update(env or {})
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


def django_path(capsys, *args: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    code = 0
    try:
        call_command("benchmark", *args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_remote_verbs_run_without_django_and_print_what_the_django_path_prints(
    live_server, capsys
) -> None:  # type: ignore[no-untyped-def]
    ops = f.user_create(username="ops", staff=True)
    token, _ = Token.objects.get_or_create(user=ops)
    f.target_create(
        slug="cli-t", model="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]}
    )
    dataset = es.fixture_dataset(["arc"])
    connection = ["--url", live_server.url, "--token", token.key]
    purge_broker()
    try:
        code, out, err, modules = console(
            "run", "--dataset", str(dataset.pk), "--target", "cli-t", "--detach",
            "--idempotency-key", "console-1", "--json", *connection,
        )  # fmt: skip
        assert code == 0, err
        assert modules == []  # neither Django nor Celery nor DRF was imported
        run_id = json.loads(out)["id"]
        assert f"run {run_id} created (idempotency key console-1)" in err

        for verb in (
            ["targets", "--json"],
            ["runs", "--json"],
            ["show", str(run_id)],
            ["show", str(run_id), "--events"],
            ["report", str(run_id)],
            ["report", str(run_id), "--json"],
        ):
            code, out, err, modules = console(*verb, *connection)
            assert (code, modules) == (0, []), (verb, err)
            assert (code, out) == django_path(capsys, *verb, *connection), verb

        # SRBENCH_URL names the server as --url does; a refusal is the same one line, exit 2.
        code, out, err, modules = console(
            "show", "999999", env={"SRBENCH_URL": live_server.url, "SRBENCH_TOKEN": token.key}
        )
        assert (code, out, modules) == (2, "", [])
        assert err.startswith("error:") and err.count("\n") == 0
    finally:
        purge_broker()


def test_local_verbs_and_bare_commands_take_the_django_path(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SRBENCH_URL", raising=False)
    assert remote_requested(["runs", "--url", "http://x"]) and remote_requested(["--url=http://x"])
    assert not remote_requested(["runs", "--user", "ops"])
    monkeypatch.setenv("SRBENCH_URL", "http://x")
    assert remote_requested(["runs"])
    # Not a remote verb, or no verb: None, and the console script boots Django instead.
    assert remote_main(["prepare", "--benchmark", "mmlu-pro", "--url", "http://x"]) is None
    assert remote_main(["--help"]) is None and remote_main([]) is None
    # Every verb of the HTTP modules is also a verb of `manage.py benchmark`.
    from srbench.management.commands.benchmark import VERB_MODULES

    assert set(HTTP_VERB_MODULES) <= set(VERB_MODULES)


def test_local_verb_with_url_still_works_through_the_console_script() -> None:
    # `prepare` is local: with --url in the arguments the console script falls back to Django,
    # whose parser knows it (and refuses the unknown --url as argparse does).
    code, _out, err, modules = console("prepare", "--help", "--url", "http://127.0.0.1:1")
    assert code == 0 and "django.apps" in modules, err


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def doc(completed: int, total: int | None, failed: int = 0) -> dict:
    return {"progress": {"completed": completed, "denominator": total, "failed": failed}}


def test_follower_polls_near_the_end_often_and_far_from_it_at_the_users_pace() -> None:
    clock = Clock()
    follow = RunFollower(1.0, clock=clock)
    assert follow.wait(doc(0, 740)) == 1.0  # nothing settled yet: no rate to go by
    clock.now += 10
    # 370 settled in 10 s: 37/s, 370 left ≈ 10 s ≫ two polls.
    assert follow.wait(doc(360, 740, failed=10)) == 1.0
    clock.now += 9
    # 703 in 19 s = 37/s: 37 left ≈ 1 s ≤ two polls.
    assert follow.wait(doc(700, 740, failed=3)) == FOLLOW_NEAR_END_POLL
    # Every cell settled, the run not ended yet (its finish is being written).
    assert follow.wait(doc(730, 740, failed=10)) == FOLLOW_NEAR_END_POLL
    # A run without a known denominator, and a user's poll below the near-end pace.
    assert RunFollower(1.0, clock=clock).wait(doc(0, None)) == 1.0
    fast = RunFollower(0.05, clock=clock)
    assert fast.wait(doc(740, 740)) == 0.05


@pytest.mark.django_db(transaction=True)
def test_remote_verbs_read_their_json_files_without_django(live_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An outside probe: every remote verb that reads a JSON file (`plan --plan-file`,
    `recover --plan`, `route-preview --messages-file`) died with Django's "settings are not
    configured" — the file check imported DRF through the API's parser. The plan file is sent,
    a file the API would refuse is one error line, and neither imports Django or DRF."""
    ops = f.user_create(username="ops", staff=True)
    token, _ = Token.objects.get_or_create(user=ops)
    f.target_create(
        slug="cli-t", model="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]}
    )
    dataset = es.fixture_dataset(["arc"])
    connection = ["--url", live_server.url, "--token", token.key]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"name": "p", "dataset": dataset.pk, "targets": ["cli-t"]}))
    code, out, err, modules = console("plan", "--plan-file", str(plan), "--json", *connection)
    assert (code, modules) == (0, []), err
    assert json.loads(out)["model_requests"] == 0
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "a\\u0000b"}')
    code, out, err, modules = console(
        "recover", "1", "--plan", str(bad), "--idempotency-key", "k", *connection
    )
    assert (code, out, modules) == (2, "", []), err
    assert err.startswith("error: cannot read") and "NUL" in err and err.count("\n") == 0


def test_console_script_usage_and_errors_name_the_command_the_user_types() -> None:
    # `srbench VERB`, never `srbench benchmark VERB` (a command line that fails): the console
    # script runs `manage.py benchmark`, whose parser Django would name "srbench benchmark".
    code, out, err, _ = console("--help")
    assert code == 0 and out.startswith("usage: srbench [-h]"), out
    assert "srbench benchmark" not in out
    code, out, err, _ = console("no-such-verb")
    assert code == 2 and "srbench: error: argument VERB: invalid choice" in err, err
    assert "srbench benchmark" not in err
