"""The Docker image and compose stack (issue 18, point 8), tested without Docker: these machines
have no daemon. The Dockerfile and compose.yaml are parsed; every COPY source must be in a clean
clone (or come from an earlier stage); the npm and pip stages' RUN steps run here as scripts in
a scratch root, and the steps that cannot (apt-get, useradd) are checked statically; every
command compose runs must exist in the repository and parse; the one-shot `setup` service's
commands run against a real simulator; the worker's capabilities are tried on the real sandbox.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError
from django.urls import resolve

from datasets.benchmarks import ADAPTERS
from datasets.models import Source
from runs.engine import sandbox
from runs.models import Target
from srbench.demo import demo_targets
from srbench.simulator.testing import running_simulator

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERIGNORE = ROOT / ".dockerignore"
TEMPLATE_STATIC = re.compile(r"""\{%\s*static\s+['"]([^'"]+)['"]\s*%\}""")
# Docker's default capability set (moby's oci/caps defaults).
DOCKER_DEFAULT_CAPS = [
    "chown",
    "dac_override",
    "fsetid",
    "fowner",
    "mknod",
    "net_raw",
    "setgid",
    "setuid",
    "setfcap",
    "setpcap",
    "net_bind_service",
    "sys_chroot",
    "kill",
    "audit_write",
]


# --- the Dockerfile, parsed ----------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    name: str | None
    base: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def dockerfile_stages(text: str) -> list[Stage]:
    """Instructions per stage; continuation lines joined, comment lines dropped (also inside a
    continuation, as Docker does)."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continuation"
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(name=name, base=words[0]))
        else:
            assert stages, f"{keyword} before FROM"
            stages[-1].instructions.append(Instruction(keyword, args.strip()))
    return stages


@dataclass
class Copy:
    sources: list[str]
    dest: str
    from_stage: str | None


def copy_parts(args: str) -> Copy:
    words = json.loads(args) if args.startswith("[") else shlex.split(args)
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    from_stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
    assert set(flags) <= {f"--from={from_stage}"}, f"unexpected COPY flags {flags}"
    return Copy(sources=paths[:-1], dest=paths[-1], from_stage=from_stage)


def env_values(stage: Stage) -> dict[str, str]:
    values: dict[str, str] = {}
    for env in stage.all("ENV"):
        for word in shlex.split(env.args):
            key, _, value = word.partition("=")
            values[key] = value
    return values


def workdir_at(stage: Stage, index: int) -> str:
    """The WORKDIR in force at instruction `index` (Docker's default is /)."""
    current = "/"
    for instruction in stage.instructions[:index]:
        if instruction.keyword == "WORKDIR":
            current = str(PurePosixPath(current) / instruction.args)
    return current


STAGES = dockerfile_stages(DOCKERFILE.read_text())
FRONTEND = next(s for s in STAGES if s.name == "frontend")
APP = STAGES[-1]


# --- the build context: a clean clone, less .dockerignore ----------------------------------


def clean_clone_files() -> set[str]:
    """The files a commit of this working tree holds: tracked, or new and not ignored by git.
    Nothing git ignores (var/, node_modules/, static/vendor/, .venv/) is in a clean clone."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return {name for name in out.split("\0") if name and (ROOT / name).is_file()}


def dockerignore_patterns() -> list[re.Pattern[str]]:
    """.dockerignore lines as regular expressions with Docker's meaning: `*` and `?` stay
    inside one path component, `**` spans any number, a pattern matching a directory excludes
    everything beneath it. (No `!` exceptions are used, and this parser refuses them.)"""
    patterns = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("!"), "exceptions are not supported by this test"
        text = str(PurePosixPath(line.lstrip("/")))
        regex = ""
        i = 0
        while i < len(text):
            if text.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif text.startswith("**", i):
                regex += ".*"
                i += 2
            elif text[i] == "*":
                regex += "[^/]*"
                i += 1
            elif text[i] == "?":
                regex += "[^/]"
                i += 1
            elif text[i] == "[":
                end = text.index("]", i)
                regex += text[i : end + 1]
                i = end + 1
            else:
                regex += re.escape(text[i])
                i += 1
        patterns.append(re.compile(regex + r"(?:/.*)?\Z"))
    return patterns


def dockerignored(path: str, patterns: list[re.Pattern[str]]) -> bool:
    return any(p.match(path) for p in patterns)


def context_files() -> set[str]:
    patterns = dockerignore_patterns()
    return {f for f in clean_clone_files() if not dockerignored(f, patterns)}


def files_under(source: str, files: set[str]) -> set[str]:
    source = source.rstrip("/")
    return {f for f in files if f == source or f.startswith(source + "/")}


def test_every_copy_source_is_in_a_clean_clone_or_an_earlier_stage() -> None:
    context = context_files()
    for position, stage in enumerate(STAGES):
        earlier = {s.name: s for s in STAGES[:position] if s.name}
        for instruction in stage.all("COPY"):
            copy = copy_parts(instruction.args)
            for source in copy.sources:
                if copy.from_stage is not None:
                    assert copy.from_stage in earlier, f"COPY --from={copy.from_stage}: no stage"
                    assert PurePosixPath(source).is_absolute(), source
                else:
                    assert files_under(source, context), (
                        f"COPY {source}: not in a clean clone, or excluded by .dockerignore"
                    )


def test_the_context_leaves_out_what_the_host_builds() -> None:
    patterns = dockerignore_patterns()
    for built in [
        ".git/HEAD",
        ".venv/bin/python",
        "var/secret_key",
        "node_modules/htmx.org/package.json",
        "static/vendor/htmx.min.js",
        "srbench/__pycache__/settings.cpython-312.pyc",
        "runs/engine/__pycache__/sandbox.cpython-312.pyc",
        "srbench.egg-info/PKG-INFO",
        ".hypothesis/examples/x",
        ".ruff_cache/CACHEDIR.TAG",
    ]:
        assert dockerignored(built, patterns), built
    # …and nothing the image needs: every file under a COPY source of the context stays in.
    needed = {
        f
        for stage in STAGES
        for i in stage.all("COPY")
        if copy_parts(i.args).from_stage is None
        for source in copy_parts(i.args).sources
        for f in files_under(source, clean_clone_files())
    }
    assert needed and not {f for f in needed if dockerignored(f, patterns)}


def test_the_static_files_in_the_image_come_from_the_npm_stage_not_the_host() -> None:
    copies = [copy_parts(i.args) for i in APP.all("COPY")]
    vendor = [c for c in copies if c.dest.rstrip("/") == "static/vendor"]
    assert [c.from_stage for c in vendor] == ["frontend"]
    produced = PurePosixPath(workdir_at(FRONTEND, len(FRONTEND.instructions))) / "static/vendor"
    assert vendor[0].sources == [str(produced)]
    # The npm stage builds with the lock file and the same script as `make frontend`.
    frontend_sources = {s for i in FRONTEND.all("COPY") for s in copy_parts(i.args).sources}
    assert {"package.json", "package-lock.json", "scripts/ensure_frontend.sh"} <= frontend_sources
    assert [r.args for r in FRONTEND.all("RUN")] == ["scripts/ensure_frontend.sh"]
    assert "npm ci" in (ROOT / "scripts/ensure_frontend.sh").read_text()


# --- the RUN steps, run here ---------------------------------------------------------------


class ScratchBuild:
    """One stage built into a scratch directory standing for the image's root filesystem."""

    def __init__(self, root: Path, context: set[str], env: dict[str, str]) -> None:
        self.root = root
        self.context = context
        self.env = env

    def path(self, inside: str | PurePosixPath) -> Path:
        return self.root / str(inside).lstrip("/")

    def copy(self, copy: Copy, workdir: str, stages: dict[str, ScratchBuild]) -> None:
        dest = PurePosixPath(workdir) / copy.dest
        for source in copy.sources:
            if copy.from_stage is not None:
                origin = stages[copy.from_stage].path(source)
                assert origin.is_dir(), f"stage {copy.from_stage} did not produce {source}"
                shutil.copytree(origin, self.path(dest), dirs_exist_ok=True)
                continue
            files = files_under(source, self.context)
            for name in files:
                if name == source:  # a file: into the directory, or as the named file
                    target = dest / Path(name).name if copy.dest.endswith("/") else dest
                else:  # a directory: its contents into dest
                    target = dest / PurePosixPath(name).relative_to(source.rstrip("/"))
                self.path(target).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, self.path(target))

    def run(self, script: str, workdir: str) -> None:
        cwd = self.path(workdir)
        cwd.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            ["/bin/sh", "-c", script],
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert result.returncode == 0, (
            f"RUN {script}\n{result.stdout[-2000:]}{result.stderr[-4000:]}"
        )


def build_stage(
    stage: Stage,
    build: ScratchBuild,
    stages: dict[str, ScratchBuild],
    run_step: Callable[[str], bool],
) -> list[str]:
    """Apply COPY, WORKDIR and RUN in order. `run_step(script)` says whether a RUN is run here;
    the ones it refuses are returned so a test checks each of them statically instead."""
    not_run = []
    for index, instruction in enumerate(stage.instructions):
        workdir = workdir_at(stage, index)
        if instruction.keyword == "COPY":
            build.copy(copy_parts(instruction.args), workdir, stages)
        elif instruction.keyword == "WORKDIR":
            build.path(workdir_at(stage, index + 1)).mkdir(parents=True, exist_ok=True)
        elif instruction.keyword == "RUN":
            if run_step(instruction.args):
                build.run(instruction.args, workdir)
            else:
                not_run.append(instruction.args)
    return not_run


@pytest.fixture(scope="module")
def frontend_build(tmp_path_factory: pytest.TempPathFactory) -> ScratchBuild:
    assert shutil.which("npm"), "npm is missing: `make test` installs the front end with it"
    build = ScratchBuild(
        tmp_path_factory.mktemp("frontend-root"), context_files(), dict(os.environ)
    )
    assert build_stage(FRONTEND, build, {}, run_step=lambda script: True) == []
    return build


@dataclass
class AppBuild:
    build: ScratchBuild
    venv: Path
    app_dir: Path
    not_run: list[str]

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            cwd=self.app_dir,
            env=self.build.env,
            capture_output=True,
            text=True,
            timeout=300,
        )


def is_apt_step(script: str) -> bool:
    return script.startswith("apt-get update")


def is_user_step(script: str) -> bool:
    return script.startswith("useradd ")


@pytest.fixture(scope="module")
def app_build(tmp_path_factory: pytest.TempPathFactory, frontend_build: ScratchBuild) -> AppBuild:
    """The Python stage in a scratch root: a fresh virtualenv stands for the base image's
    Python (its `pip` and `python` first on PATH), the image's ENV applied with /app mapped
    into the scratch root. The pip step installs from PyPI, as the image build does."""
    root = tmp_path_factory.mktemp("app-root")
    venv = tmp_path_factory.mktemp("image-python") / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", str(venv)], check=True, timeout=300)
    image_env = {
        key: value.replace("/app", str(root / "app")) for key, value in env_values(APP).items()
    }
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))},
        **image_env,
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "DJANGO_SETTINGS_MODULE": "srbench.settings",
        "SECRET_KEY": "image-test",
        # Parsed by the settings, never connected to: no command below opens the database.
        "DATABASE_URL": "postgres://srbench@db.invalid/srbench",
        "SRBENCH_VAR_DIR": str(root / "app" / "var"),
    }
    build = ScratchBuild(root, context_files(), env)

    def runnable(script: str) -> bool:
        # apt-get installs system packages and useradd creates a system account: neither is
        # done to the machine running the tests; test_steps_not_run_here_… checks them.
        return not (is_apt_step(script) or is_user_step(script))

    not_run = build_stage(APP, build, {"frontend": frontend_build}, run_step=runnable)
    return AppBuild(build=build, venv=venv, app_dir=root / "app", not_run=not_run)


def test_npm_stage_produces_every_vendor_file_the_templates_load(
    frontend_build: ScratchBuild,
) -> None:
    vendor = frontend_build.path("/build/static/vendor")
    referenced = {
        ref.removeprefix("vendor/")
        for template in (ROOT / "templates").rglob("*.html")
        for ref in TEMPLATE_STATIC.findall(template.read_text())
        if ref.startswith("vendor/")
    }
    assert referenced == {"htmx.min.js"}
    for name in referenced:
        assert (vendor / name).stat().st_size > 10_000, name
    assert b"htmx" in (vendor / "htmx.min.js").read_bytes()[:4000]


def test_image_python_stage_installs_the_dependencies_and_runs_the_app(app_build: AppBuild) -> None:
    """The pip step ran from pyproject.toml alone; the code runs from /app with those packages."""
    site = next((app_build.venv / "lib").glob("python3*/site-packages"))
    # Only the distribution's metadata: no application package, no fixture, in site-packages,
    # which the sandbox mounts read-only into every sandbox.
    leaked = {p.name for p in site.iterdir()} & {
        "srbench",
        "runs",
        "datasets",
        "compare",
        "recipes",
    }
    assert leaked == set()
    assert not list(site.rglob("fixtures/terminal-bench"))
    where = app_build.run("python", "-c", "import srbench, datasets; print(srbench.__file__)")
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(app_build.app_dir)
    check = app_build.run("python", "manage.py", "check")
    assert check.returncode == 0, check.stderr
    # Every static file the pages load is found in the image: ours, npm's and the sidecar's.
    found = app_build.run(
        "python",
        "manage.py",
        "findstatic",
        "css/srbench.css",
        "vendor/htmx.min.js",
        "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js",
        "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js",
    )
    assert found.returncode == 0 and found.stdout.count("Found ") == 4, found.stdout + found.stderr
    assert str(app_build.app_dir / "static" / "vendor" / "htmx.min.js") in found.stdout
    # The console script and the Celery app resolve the same way.
    assert app_build.run("srbench", "--help").returncode == 0
    report = app_build.run("celery", "-A", "srbench", "report")
    assert report.returncode == 0 and "celery:" in report.stdout, report.stderr


def test_steps_not_run_here_are_checked_statically(app_build: AppBuild) -> None:
    assert len(app_build.not_run) == 2
    apt = next(s for s in app_build.not_run if is_apt_step(s))
    packages = set(re.search(r"--no-install-recommends ([\w .+-]+?)\s*&&", apt).group(1).split())
    # Each tool the sandbox calls must come from one of these packages (the image is Debian
    # bookworm, like this machine; `dpkg -S` says which package ships each tool here)…
    for tool in ("bwrap", "prlimit", "setpriv"):
        assert tool in sandbox._tools(), tool
        path = Path(sandbox._tools()[tool]).resolve()
        owner = subprocess.run(["dpkg", "-S", str(path)], capture_output=True, text=True)
        if owner.returncode != 0:  # merged /usr: dpkg knows the /usr/bin spelling
            owner = subprocess.run(
                ["dpkg", "-S", f"/usr/bin/{path.name}"], capture_output=True, text=True
            )
        assert owner.returncode == 0, owner.stderr
        assert owner.stdout.split(":")[0] in packages, (tool, owner.stdout)
        # …and the build stops if a Debian release ever moves it elsewhere.
        assert f"command -v {tool}" in apt
    simulated = subprocess.run(
        ["apt-get", "install", "-s", "--no-install-recommends", *sorted(packages)],
        capture_output=True,
        text=True,
    )
    assert simulated.returncode == 0, simulated.stdout + simulated.stderr
    assert "rm -rf /var/lib/apt/lists/*" in apt
    # The account the image ends as owns the var directory the settings write to.
    user_step = next(s for s in app_build.not_run if is_user_step(s))
    user = APP.all("USER")[-1].args
    assert re.search(rf"useradd --system .*\b{user}\b", user_step)
    assert f"chown {user} /app/var" in user_step
    assert env_values(APP)["PYTHONPATH"] == "/app" == workdir_at(APP, len(APP.instructions))


# --- compose.yaml --------------------------------------------------------------------------

COMPOSE_DOC = yaml.safe_load(COMPOSE.read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE_DOC["services"]
OURS = {name for name, s in SERVICES.items() if "build" in s}


def test_compose_has_the_stack_and_one_image_for_our_services() -> None:
    assert set(SERVICES) == {"postgres", "redis", "migrate", "setup", "web", "worker", "simulator"}
    assert sorted(OURS) == ["migrate", "setup", "simulator", "web", "worker"]
    for name in OURS:
        build = SERVICES[name]["build"]
        assert (COMPOSE.parent / build["context"]).resolve() == ROOT
        assert (ROOT / build["dockerfile"]).resolve() == DOCKERFILE


def test_every_dependency_exists_and_the_order_has_no_cycle() -> None:
    conditions = {"service_started", "service_healthy", "service_completed_successfully"}
    graph: dict[str, set[str]] = {}
    for name, service in SERVICES.items():
        depends = service.get("depends_on") or {}
        if isinstance(depends, list):
            depends = {d: {"condition": "service_started"} for d in depends}
        graph[name] = set(depends)
        for other, spec in depends.items():
            assert other in SERVICES, (name, other)
            assert spec["condition"] in conditions, (name, spec)
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[other], f"{name} waits for {other}'s health"
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"dependency cycle {path + (name,)}"
        for other in graph[name]:
            visit(other, path + (name,))
        done.add(name)

    for name in graph:
        visit(name, ())


def completed(service: str, dependency: str) -> bool:
    spec = (SERVICES[service].get("depends_on") or {}).get(dependency)
    return bool(spec) and spec["condition"] == "service_completed_successfully"


def test_migrations_run_once_before_the_services_that_use_the_database() -> None:
    assert SERVICES["migrate"]["command"] == ["python", "manage.py", "migrate"]
    assert SERVICES["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("setup", "web", "worker"):
        assert completed(name, "migrate"), name
    for one_shot in ("migrate", "setup"):
        assert SERVICES[one_shot]["restart"] == "no"


def setup_commands() -> list[list[str]]:
    command = SERVICES["setup"]["command"]
    assert command[:2] == ["sh", "-ec"], "one command a line; -e stops at the first failure"
    return [shlex.split(line) for line in command[2].splitlines() if line.strip()]


def test_setup_registers_the_simulator_targets_after_migrations_once_it_answers() -> None:
    assert completed("setup", "migrate")
    assert SERVICES["setup"]["depends_on"]["simulator"]["condition"] == "service_healthy"
    verbs = [argv[3] for argv in setup_commands()]
    assert verbs == ["simulator-targets", "ensure-login", "prepare"]
    url = setup_commands()[0][setup_commands()[0].index("--simulator-url") + 1]
    simulator = SERVICES["simulator"]["command"]
    port = simulator[simulator.index("--port") + 1]
    assert url == f"http://simulator:{port}"
    assert simulator[simulator.index("--host") + 1] == "0.0.0.0"
    # The password is optional: unset, the first start generates and prints one.
    assert SERVICES["setup"]["environment"]["SRBENCH_PASSWORD"] == "${SRBENCH_PASSWORD:-}"


def check_command(argv: list[str]) -> None:
    """The program and arguments exist in this repository (or its dependencies) and parse."""
    if argv[:2] == ["python", "manage.py"]:
        name = argv[2]
        commands = get_commands()
        assert name in commands, f"no management command {name!r}"
        parser = load_command_class(commands[name], name).create_parser("manage.py", name)
        try:
            parser.parse_args(argv[3:])
        except (SystemExit, CommandError) as exc:
            raise AssertionError(f"{argv} does not parse") from exc
    elif argv[:3] == ["python", "-m", "uvicorn"]:
        module, _, attribute = argv[3].partition(":")
        assert getattr(importlib.import_module(module), attribute) is not None
    elif argv[:2] == ["python", "-m"]:
        module = argv[2]
        spec = importlib.util.find_spec(module)
        assert spec and spec.origin and Path(spec.origin).is_relative_to(ROOT), module
        assert importlib.util.find_spec(f"{module}.__main__"), f"{module} is not runnable"
    elif argv[0] == "celery":
        assert argv[1:4] == ["-A", "srbench", "worker"], argv
        from celery import Celery

        assert isinstance(importlib.import_module("srbench.celery").app, Celery)
    elif argv[:2] == ["sh", "-ec"]:
        for line in argv[2].splitlines():
            if line.strip():
                check_command(shlex.split(line))
    else:
        raise AssertionError(f"unknown program in {argv}")


def test_every_command_compose_runs_exists_in_the_repository() -> None:
    cmd = json.loads(APP.all("CMD")[-1].args)
    check_command(cmd)  # the image's default command: the web service
    for name in sorted(OURS):
        if "command" in SERVICES[name]:
            check_command(SERVICES[name]["command"])
    assert resolve("/login/")  # web's health check


def test_the_database_and_broker_urls_point_at_their_services() -> None:
    env = SERVICES["web"]["environment"]
    assert "@postgres:5432/" in env["DATABASE_URL"]
    assert env["DATABASE_URL"].endswith("/" + SERVICES["postgres"]["environment"]["POSTGRES_DB"])
    assert env["CELERY_BROKER_URL"].startswith("redis://redis:6379/")
    assert env["SECRET_KEY"] == "${SECRET_KEY:?set SECRET_KEY}"  # required, never a default
    for name in OURS:
        assert SERVICES[name]["environment"]["DATABASE_URL"] == env["DATABASE_URL"], name


@pytest.mark.parametrize("service", ["simulator", "web"])
def test_health_checks_are_commands_the_image_can_run(service: str) -> None:
    test = SERVICES[service]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    url = re.search(r"'(http://127\.0\.0\.1:\d+/[^']*)'", test[3]).group(1)
    if service == "simulator":
        # Run it: against a real simulator, on the port it got here.
        with running_simulator() as live:
            code = test[3].replace(url.rsplit("/", 1)[0], live)
            assert subprocess.run([sys.executable, "-c", code], timeout=30).returncode == 0
    else:
        assert url.endswith(":8000/login/") and "8000" in SERVICES["web"]["ports"][0]


@pytest.mark.django_db
def test_setup_service_commands_leave_a_usable_portal_and_can_run_again(
    client: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run the setup lines as they are (in-process, against a real simulator): the portal has
    the simulated targets, a login and the smoke sources; a second `up` changes nothing."""
    monkeypatch.setenv("SRBENCH_PASSWORD", "compose-pass-123")
    with running_simulator() as live:
        for attempt in range(2):
            if attempt == 1:
                monkeypatch.delenv("SRBENCH_PASSWORD")
            for argv in setup_commands():
                args = [live if a == "http://simulator:8100" else a for a in argv[3:]]
                try:
                    call_command("benchmark", *args)
                except SystemExit as exc:
                    raise AssertionError(
                        f"{argv} exited {exc.code}: {capsys.readouterr()}"
                    ) from exc
            out = capsys.readouterr().out
            assert ("password from $SRBENCH_PASSWORD" in out) == (attempt == 0), out
    targets = {t.slug: t for t in Target.objects.all()}
    assert {"sim-strong", "sim-weak", "sim-router", "sim-judge", "sim-user"} <= set(targets)
    assert all(t.base_url == f"{live}/v1" for t in targets.values())
    assert {s.benchmark for s in Source.objects.filter(profile="smoke")} == set(ADAPTERS)
    assert Source.objects.count() == len(ADAPTERS)
    user = get_user_model().objects.get(username="admin")
    assert user.is_staff and get_user_model().objects.count() == 1
    assert client.login(username="admin", password="compose-pass-123")
    page = client.get("/targets/")
    assert page.status_code == 200 and b"sim-router" in page.content


def test_the_registration_verb_is_the_demos(monkeypatch: pytest.MonkeyPatch) -> None:
    """`simulator-targets` registers what `make demo` registers: one definition of the targets."""
    from srbench.cli import local

    seen: list[str] = []
    monkeypatch.setattr("srbench.demo.demo_targets", lambda url: seen.append(url) or [])
    with running_simulator() as live:
        assert local.simulator_targets(simulator_url=live + "/", wait=5) == 0
    assert seen == [live]
    assert demo_targets.__module__ == "srbench.demo"


# --- the worker's privileges, tried on the real sandbox -------------------------------------


def worker_caps() -> list[str]:
    return [c.lower() for c in SERVICES["worker"]["cap_add"]]


def test_only_the_worker_gets_privileges_and_not_all_of_them() -> None:
    worker = SERVICES["worker"]
    assert worker["user"] == "root"
    assert sorted(worker_caps()) == ["net_admin", "sys_admin"]
    assert sorted(worker["security_opt"]) == ["apparmor=unconfined", "seccomp=unconfined"]
    assert not worker.get("privileged")
    for name, service in SERVICES.items():
        if name != "worker":
            assert not {"cap_add", "security_opt", "privileged", "user"} & set(service), name
    decisions = (ROOT / "docs" / "decisions.md").read_text()
    assert "## Docker: the worker's sandbox" in decisions
    assert 'docs/decisions.md "Docker: the worker\'s sandbox"' in COMPOSE.read_text()


SANDBOX_PROBE = """
from runs.engine.sandbox import SandboxLimits, sandbox_python, sandbox_run
code = "import os; s = open('/proc/self/status').read(); print(os.getuid(), [l for l in s.splitlines() if l.startswith(('CapEff', 'NoNewPrivs'))])"
r = sandbox_run(argv=[sandbox_python(), "-c", code], files={}, limits=SandboxLimits(wall_s=30, cpu_s=10))
print(r.reason, r.exit_code, r.stdout.decode().strip(), r.stderr.decode().strip())
"""


def sandbox_with_caps(caps: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a sandboxed program from a root process whose capabilities are exactly `caps`, as in
    a container with that set (bounding set cut, nothing inheritable)."""
    assert os.geteuid() == 0, "the worker's container runs as root; so do the tests"
    bounding = ",".join(["-all", *(f"+{c}" for c in caps)])
    return subprocess.run(
        ["setpriv", f"--bounding-set={bounding}", "--inh-caps=-all", "--", sys.executable]
        + ["-c", SANDBOX_PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dockers_default_caps_plus_the_worker_caps_run_the_sandbox() -> None:
    assert sandbox.sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"
    result = sandbox_with_caps(DOCKER_DEFAULT_CAPS + worker_caps())
    assert result.returncode == 0, result.stderr
    reason, exit_code, uid, *status = result.stdout.split(" ", 3)
    assert (reason, exit_code) == ("ok", "0"), result.stdout
    # The program itself: a fresh unprivileged uid, no capability, no way to gain one.
    assert int(uid) >= sandbox.UID_LOW
    assert "'CapEff:\\t0000000000000000'" in status[0] and "'NoNewPrivs:\\t1'" in status[0]


@pytest.mark.parametrize("dropped", ["sys_admin", "net_admin"])
def test_each_worker_cap_is_needed(dropped: str) -> None:
    assert sandbox.sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"
    caps = [c for c in DOCKER_DEFAULT_CAPS + worker_caps() if c != dropped]
    result = sandbox_with_caps(caps)
    assert not result.stdout.startswith("ok 0"), result.stdout
    assert "bwrap:" in result.stdout + result.stderr
