"""Verbs that run processes on this machine rather than talk to the API: the simulator, the
demo supervisor and the broker/worker health check."""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import transaction

from runs.models import TERMINAL_RUN_STATUSES, RunStatus
from srbench.api_client import EXIT_FAILED, EXIT_UNREACHABLE, cli_error, cli_guard

ROOT = Path(settings.BASE_DIR)


def free_port(preferred: int, host: str = "127.0.0.1") -> int:
    """The preferred port when it is free, else any free one (a second demo must not collide)."""
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RuntimeError("no free port")


def wait_http(url: str, *, timeout: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            httpx.get(url, timeout=2.0)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f}s")


def demo_login(var_dir: Path) -> tuple[str, str]:
    """The demo operator account; its password is generated once and kept in var/."""
    path = var_dir / "demo-login.txt"
    if path.exists():
        username, password = path.read_text().split("\n")[:2]
    else:
        username, password = "demo", secrets.token_urlsafe(12)
        path.write_text(f"{username}\n{password}\n")
        path.chmod(0o600)
    user, _ = get_user_model().objects.get_or_create(username=username)
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    return username, password


def demo_commands(port: int, simulator_port: int, simulator_config: Path) -> dict[str, list[str]]:
    """The argv of each demo child: simulator, worker and web."""
    return {
        "simulator": [
            sys.executable,
            "-m",
            "srbench.simulator",
            "--port",
            str(simulator_port),
            "--config",
            str(simulator_config),
        ],
        "worker": [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "srbench",
            "worker",
            "--loglevel=INFO",
            "--pool=threads",
            "--concurrency=4",
            "--without-gossip",
            "--without-mingle",
        ],
        "web": [
            sys.executable,
            "-m",
            "uvicorn",
            "srbench.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
    }


def start_children(
    commands: dict[str, list[str]],
    env: dict[str, str],
    logs: Path,
    children: dict[str, subprocess.Popen[bytes]],
) -> None:
    """Start each child in its own session, logging to var/logs; fills children as it goes so
    the caller can stop those already started when a later one fails."""
    for name, argv in commands.items():
        log = open(logs / f"{name}.log", "ab")  # noqa: SIM115 - held by the child
        children[name] = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


# How the demo stops (Ctrl-C): the worker first, and waited for, so that its calls in flight
# end while the simulator still answers them — a simulator gone first turns each of them into a
# transport failure of the target, and the run's fail-closed policy into a failed run. Celery's
# warm shutdown waits for the running `run_drive`, which goes on claiming cells until its run
# ends: past WORKER_STOP_S the worker is killed, and its run is left to the recovery pass
# (runs/engine/reaper.py) of the next worker. Then the web and the simulator; the database last,
# when this process exits (srbench.embedded_pg stops it with its last user).
WORKER_STOP_S = 20.0
CHILD_STOP_S = 15.0
STOP_FIRST = ("worker",)
# uvicorn re-raises a captured SIGTERM once it has shut down, and so dies without running its
# exit handlers (its registration with the embedded database among them); a SIGINT ends in
# uvicorn's KeyboardInterrupt path, the same graceful shutdown followed by a normal exit.
STOP_SIGNALS = {"web": signal.SIGINT}
EXIT_INTERRUPTED = 130  # as a shell reports a command stopped by Ctrl-C


def stop_children(
    children: dict[str, subprocess.Popen[bytes]],
    *,
    worker_grace: float = WORKER_STOP_S,
    grace: float = CHILD_STOP_S,
) -> None:
    """Stop the demo's children in order: the worker, waited for up to `worker_grace` seconds
    (then SIGKILL), then the others (`grace` each, then SIGKILL)."""
    first = {n: p for n, p in children.items() if n in STOP_FIRST}
    rest = {n: p for n, p in children.items() if n not in STOP_FIRST}
    _stop_group(first, worker_grace)
    _stop_group(rest, grace)


def _stop_group(group: dict[str, subprocess.Popen[bytes]], grace: float) -> None:
    for name, process in group.items():
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, STOP_SIGNALS.get(name, signal.SIGTERM))
    deadline = time.monotonic() + grace
    for process in group.values():
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def python_command() -> str:
    """The interpreter that runs this demo, as a command pasted in another terminal of the
    checkout can name it: `.venv/bin/python` when it lies in the checkout (a new shell's
    `python` is not the venv's), else its absolute path."""
    exe = Path(os.path.abspath(sys.executable))
    for candidate in (exe, exe.parent.resolve() / exe.name):
        with contextlib.suppress(ValueError):
            return shlex.quote(str(candidate.relative_to(ROOT)))
    return shlex.quote(str(exe))


def cli_line(*args: str) -> str:
    """A next step the demo prints: `manage.py benchmark ARGS` with the interpreter that works."""
    return "  " + " ".join([python_command(), "manage.py", "benchmark", *map(shlex.quote, args)])


def run_demo_evaluation(setup: Any, data: Any, simulator_url: str, username: str, url: str) -> int:
    """Register the demo targets and run the smoke evaluation of what this machine can run,
    and beside it the headline run on held-out questions (issue 35)."""
    from runs.engine.sandbox_command import sandbox_available

    setup.demo_targets(simulator_url)
    benchmarks, not_run = setup.demo_benchmarks(data.dataset, sandbox=sandbox_available())
    no_sandbox = (
        "no code sandbox on this machine (bubblewrap; run scripts/ensure_sandbox.sh as "
        "root, then make demo again)"
    )
    if not_run:
        print(f"not run: {', '.join(not_run)} — {no_sandbox}", flush=True)
    return demo_evaluation(
        setup.demo_plan(data.dataset, benchmarks),
        username,
        not_planned=dict.fromkeys(not_run, no_sandbox),
        hints=data.hints(),
        headline=setup.headline_plan(setup.headline_dataset(data)),
        url=url,
    )


def demo(*, port: int = 8000, simulator_port: int = 8100, exit_after_ready: bool = False) -> int:
    """Bring up simulator, worker and web on the embedded default, run a smoke evaluation of
    the nine benchmarks (ARC-AGI-2, SciCode and τ³ airline from their installed packages),
    print the sr-bench score or the subset and what is missing, and where to look.

    One demo per var dir (srbench.demo_lock): a second one is refused before it touches
    anything. Children are started in their own session and stopped in order on Ctrl-C
    (`stop_children`); Ctrl-C says "demo stopped", and exits 130 unless the demo had finished
    its evaluation and was only serving the portal.
    """
    from srbench.demo_lock import DemoAlreadyRunning, DemoLock

    var_dir = Path(settings.VAR_DIR)
    try:
        lock = DemoLock.acquire(var_dir)
    except DemoAlreadyRunning as exc:
        return cli_error(str(exc), EXIT_FAILED)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, _interrupt)
    children: dict[str, subprocess.Popen[bytes]] = {}
    state = {"serving": False}
    interrupted = False
    try:
        return _demo_up(var_dir, port, simulator_port, exit_after_ready, children, lock, state)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        # A second Ctrl-C must not leave the worker running on a dead simulator or the
        # database stopped under it: the stop is bounded (stop_children) and not interrupted.
        for sig in handlers:
            signal.signal(sig, signal.SIG_IGN)
        try:
            stop_children(children)
        finally:
            lock.release()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        if interrupted:
            print("demo stopped", flush=True)
    return 0 if state["serving"] else EXIT_INTERRUPTED


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _demo_up(
    var_dir: Path,
    port: int,
    simulator_port: int,
    exit_after_ready: bool,
    children: dict[str, subprocess.Popen[bytes]],
    lock: Any,
    state: dict[str, bool],
) -> int:
    """The demo under its lock: data, children (into `children`), evaluation, then serving
    (`state["serving"]`) until Ctrl-C or a child exits."""
    from srbench import demo as setup

    call_command("migrate", verbosity=0)
    username, password = demo_login(var_dir)
    print(
        "preparing the demo datasets (installed packages, synthetic files, bundled fixtures)…",
        flush=True,
    )
    started = time.monotonic()
    data = setup.demo_data(var_dir)
    for line in data.lines():
        print(line, flush=True)
    simulator_config = setup.simulator_config(data.dataset, var_dir)
    h5 = setup.scicode_test_data(var_dir, data)
    env = dict(os.environ)
    if h5 is not None:
        env["SRBENCH_SCICODE_H5"] = str(h5)
        # This process freezes the demo's plan, and a plan leaves out SciCode problems whose
        # test targets the server does not hold (runs.engine.runnable_here): it must see the same file.
        settings.SRBENCH_SCICODE_H5 = str(h5)
    logs = var_dir / "logs"
    logs.mkdir(exist_ok=True)
    port = free_port(port)
    simulator_port = free_port(simulator_port)
    start_children(demo_commands(port, simulator_port, simulator_config), env, logs, children)
    simulator_url = f"http://127.0.0.1:{simulator_port}"
    wait_http(f"{simulator_url}/health", timeout=60, process=children["simulator"])
    url = f"http://127.0.0.1:{port}/"
    wait_http(f"{url}login/", timeout=60, process=children["web"])
    lock.announce(url)
    print(f"srbench is running at {url}", flush=True)
    print(f"log in as: {username} / {password}", flush=True)
    print(f"simulator: {simulator_url}/v1   logs: {logs}", flush=True)
    if exit_after_ready:
        state["serving"] = True
        return 0
    code = run_demo_evaluation(setup, data, simulator_url, username, url)
    print(f"demo wall time {time.monotonic() - started:.0f}s", flush=True)
    if code:
        return code
    state["serving"] = True
    print(f"open {url} to see it; Press Ctrl-C to stop.", flush=True)
    while all(p.poll() is None for p in children.values()):
        time.sleep(1)
    dead = [n for n, p in children.items() if p.poll() is not None]
    print(f"stopped: {', '.join(dead)} exited; see {logs}", file=sys.stderr)
    return 1


def _run_start(client: Any, plan: dict[str, Any]) -> dict[str, Any]:
    import uuid

    run: dict[str, Any] = client.json(
        "POST", "runs/", json=plan, headers={"Idempotency-Key": f"demo-{uuid.uuid4()}"}
    )
    return run


def _run_wait(client: Any, run: dict[str, Any], deadline: float) -> dict[str, Any] | None:
    """The run once it has ended, or None (said on stderr) when the deadline passes first."""
    while run["status"] not in TERMINAL_RUN_STATUSES:
        if time.monotonic() > deadline:
            print(f"run {run['id']} still {run['status']} after 10 minutes", file=sys.stderr)
            return None
        time.sleep(1)
        run = client.json("GET", f"runs/{run['id']}/")
    return run


def demo_evaluation(
    plan: dict[str, Any],
    username: str,
    not_planned: dict[str, str] | None = None,
    hints: dict[str, str] | None = None,
    headline: dict[str, Any] | None = None,
    url: str = "",
) -> int:
    """Start the smoke evaluation (and the ``headline`` run beside it) through the API, as the
    CLI does; wait for the smoke report and print the sr-bench score over the nine, or the
    subset and what is missing and why; then answer the headline question in one sentence."""
    from runs.interfaces.cli import report_text
    from srbench.api_client import ApiClient
    from srbench.demo import score_lines

    client = ApiClient(user=username)
    run = _run_start(client, plan)
    print(
        f"evaluation started: run {run['id']} ({run['progress']['denominator']} cells)", flush=True
    )
    held = _run_start(client, headline) if headline is not None else None
    if held is not None and headline is not None:
        print(headline_started(held, headline), flush=True)
    deadline = time.monotonic() + 600
    ended = _run_wait(client, run, deadline)
    if ended is None:
        return 1
    report = client.json("GET", f"runs/{ended['id']}/report/")
    print(report_text(report), flush=True)
    for line in score_lines(report, not_planned or {}, hints):
        print(line, flush=True)
    print(f"evaluation finished: run {ended['id']} {ended['status']}", flush=True)
    print(cli_line("report", str(ended["id"]), "--user", username), flush=True)
    code = 0 if ended["status"] == RunStatus.COMPLETED else 1
    if held is not None:
        code = max(code, headline_answer(client, held, deadline, username, url))
    return code


def headline_started(run: dict[str, Any], plan: dict[str, Any]) -> str:
    """The headline run's first line. Its margin is worded as the run froze it (the manifest's
    canonical text, runs.planning.plans.margin_text), which is how the answer sentence words it
    (compare.headline): "0.1" both times, never "0.10" here and "0.1" there."""
    from runs.planning.plans import margin_text

    margin = margin_text(Decimal(str(plan["non_inferiority_margin"])))
    return (
        f"headline run started: run {run['id']} ({run['progress']['denominator']} cells "
        f"on held-out questions, non-inferiority margin {margin} fixed in its plan)"
    )


def headline_answer(
    client: Any, run: dict[str, Any], deadline: float, username: str, url: str
) -> int:
    """Wait for the headline run, compare its router with its strongest single model and print
    the answer in one sentence (compare.headline), with where to see it."""
    from compare.headline import headline_sentence
    from srbench.demo import HEADLINE_CANDIDATE

    ended = _run_wait(client, run, deadline)
    if ended is None:
        return 1
    print(f"headline run finished: run {ended['id']} {ended['status']}", flush=True)
    if ended["status"] != RunStatus.COMPLETED:
        return 1
    doc = client.json(
        "POST", "compare/", json={"baseline": ended["id"], "candidates": [ended["id"]]}
    )
    print(headline_sentence(doc, HEADLINE_CANDIDATE, ended["id"]), flush=True)
    base = url.rstrip("/")
    print(
        f"  compare: {base}/compare/?baseline={ended['id']}&candidates={ended['id']}&compare=1",
        flush=True,
    )
    print(cli_line("compare", str(ended["id"]), str(ended["id"]), "--user", username), flush=True)
    return 0


def simulator_targets(*, simulator_url: str, wait: float = 60.0) -> int:
    """Register the demo's simulated targets (sim-strong, sim-weak, sim-router, sim-judge,
    sim-user) against a simulator that is already running, at the URL the workers reach it by:
    the compose file's `setup` service points them at its `simulator` container. Idempotent:
    a second call points the same targets at the URL again."""
    from srbench import demo as setup

    simulator_url = simulator_url.rstrip("/")
    deadline = time.monotonic() + wait
    while True:
        try:
            httpx.get(f"{simulator_url}/health", timeout=2.0).raise_for_status()
            break
        except httpx.HTTPError as exc:
            if time.monotonic() >= deadline:
                return cli_error(
                    f"the simulator at {simulator_url} did not answer within {wait:.0f}s: {exc}",
                    EXIT_UNREACHABLE,
                )
            time.sleep(0.5)
    try:
        targets = setup.demo_targets(simulator_url)
    except httpx.HTTPError as exc:
        return cli_error(f"the simulator at {simulator_url} failed: {exc}", EXIT_UNREACHABLE)
    for target in targets:
        print(f"target {target.slug}: model {target.model} at {target.base_url}", flush=True)
    return 0


def ensure_login(*, username: str, operator: bool, password_env: str) -> int:
    """A portal login for a fresh installation (the compose file's `setup` service).

    Idempotent: when the environment variable `password_env` holds a password, the account is
    created or its password set to it; otherwise an existing account keeps its password and a
    new one gets a generated password, printed this once."""
    password = os.environ.get(password_env, "")
    user_model = get_user_model()
    generated = ""
    with transaction.atomic(durable=True):
        user, created = user_model.objects.get_or_create(username=username)
        if password:
            try:
                validate_password(password, user)
            except ValidationError as exc:
                transaction.set_rollback(True)
                return cli_error(f"{password_env}: {' '.join(exc.messages)}", EXIT_FAILED)
            user.set_password(password)
        elif created:
            generated = secrets.token_urlsafe(12)
            user.set_password(generated)
        if operator:
            user.is_staff = user.is_superuser = True
        user.save()
    role = " (operator)" if user.is_staff else ""
    if password:
        print(f"login {username}{role}: password from ${password_env}", flush=True)
    elif generated:
        print(f"login {username}{role} created; password: {generated}", flush=True)
        print(f"  (shown once; set ${password_env} and run this again to choose one)", flush=True)
    else:
        print(f"login {username}{role} exists; password unchanged", flush=True)
    return 0


def doctor(*, timeout: float = 30.0) -> int:
    """Prove the whole chain: database write → broker → a worker → database write."""
    from srbench.models import WorkerPing
    from srbench.services import worker_ping_send

    ping = worker_ping_send()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answered = WorkerPing.objects.filter(pk=ping.pk, answered_at__isnull=False).first()
        if answered is not None:
            print(f"ok: worker {answered.worker_hostname} (pid {answered.worker_pid}) answered")
            return 0
        time.sleep(0.2)
    print(
        f"no worker answered within {timeout:.0f}s (broker {settings.CELERY_BROKER_URL})",
        file=sys.stderr,
    )
    return 1


def register(verbs: Any) -> None:
    p = verbs.add_parser("simulator", help="serve the OpenAI-compatible simulator")
    p.add_argument("--config", default=None, help="TOML config (default: bundled)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.set_defaults(handler=_simulator)

    p = verbs.add_parser("demo", help="run the demo: simulator, worker and web")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--simulator-port", type=int, default=8100)
    p.add_argument("--exit-after-ready", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(
        handler=lambda o: demo(
            port=o["port"],
            simulator_port=o["simulator_port"],
            exit_after_ready=o["exit_after_ready"],
        )
    )

    p = verbs.add_parser(
        "simulator-targets", help="register the simulated targets of a running simulator"
    )
    p.add_argument(
        "--simulator-url",
        required=True,
        help="the simulator's root URL as the workers reach it, e.g. http://simulator:8100",
    )
    p.add_argument("--wait", type=float, default=60.0, help="seconds to wait for it to answer")
    p.set_defaults(
        handler=cli_guard(
            lambda o: simulator_targets(simulator_url=o["simulator_url"], wait=o["wait"])
        )
    )

    p = verbs.add_parser("ensure-login", help="create a portal login (idempotent)")
    p.add_argument("--username", required=True)
    p.add_argument("--operator", action="store_true", help="staff: admin and every run")
    p.add_argument(
        "--password-env",
        default="SRBENCH_PASSWORD",
        help="environment variable holding the password (unset: generate one for a new login)",
    )
    p.set_defaults(
        handler=cli_guard(
            lambda o: ensure_login(
                username=o["username"], operator=o["operator"], password_env=o["password_env"]
            )
        )
    )

    p = verbs.add_parser("doctor", help="check database → broker → worker round trip")
    p.add_argument("--timeout", type=float, default=30.0)
    # Guarded like the API verbs: on a fresh var/ (no `make demo` yet) the embedded database
    # has no tables, and the answer is what to run, not a traceback.
    p.set_defaults(handler=cli_guard(lambda o: doctor(timeout=o["timeout"])))


def _simulator(options: dict[str, Any]) -> int:
    """The simulator in the foreground. A config's ``[answer_key] sources`` are read here,
    through the benchmark adapters: the simulator itself reads no dataset file (issue 24)."""
    from datasets.answer_key import answer_key_for_config
    from srbench.simulator.config import load_config
    from srbench.simulator.server import serve

    config = load_config(options["config"])
    answer_key = answer_key_for_config(config)
    serve(config, answer_key=answer_key, host=options["host"], port=options["port"])
    return 0
