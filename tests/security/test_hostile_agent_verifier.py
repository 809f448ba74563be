"""A Terminal-Bench agent that leaves files for the verifier instead of doing the task, through
the real path (R9.3; model output is hostile input): a run created by the service the API uses,
a Celery worker process, the simulator typing the hostile commands as the model's tool calls,
each cell's grade read back.

The verifiers of two bundled tasks run `python3 -m pytest` from `/app`, the agent's directory:
the legacy csv-column-sum (`run-tests.sh`, graded by its exit status) and the Harbor
fix-broken-script (`test.sh`, which writes `/logs/verifier/reward.txt`). A third task, written
here, checks its answer with the system's `/usr/bin/python3`. Each variant plants one thing a
Python, pytest or a shell might read — a module that shadows pytest, one of its dependencies or
the standard library, a compiled module, a plugin's entry point, pytest's configuration files,
a user site `.pth`, a `python3` of its own, a reward written in advance —
whose code, if it ever ran in the verifier, would write reward 1 and exit 0. Two more write
the program fix-broken-script's tests run (`median.py`) to forge the reward from inside the
tests: one locks a reward of 1 against the test script's own write, one leaves a daemon writing
1. The task is never done, so every cell must score 0 with the task's own tests having run and
failed — except where the agent left a module a Python imports at start-up (`sitecustomize`,
`re.py`): that session is not verified at all.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from datasets.benchmarks import get_adapter
from datasets.benchmarks.base import LoadedQuestion
from datasets.benchmarks.terminal_bench import TERMINAL_TOOL
from runs.models import Call, Cell
from srbench.simulator.oracle import AnswerKey, first_user_text
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

FORGE = """import os
os.makedirs("/logs/verifier", exist_ok=True)
with open("/logs/verifier/reward.txt", "w") as reward:
    reward.write("1")
os._exit(0)
"""
FORGE_SHELL = "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; exit 0"
FORGE_PTH = (
    "import os; os.makedirs('/logs/verifier', exist_ok=True); "
    "open('/logs/verifier/reward.txt', 'w').write('1'); os._exit(0)"
)


def plant(path: str, text: str) -> str:
    """One agent command writing `text` to `path` (a heredoc, as an agent would type it)."""
    return f"mkdir -p \"$(dirname {path})\" && cat > {path} <<'PLANTED'\n{text.rstrip()}\nPLANTED"


def user_site_pth() -> str:
    """A `.pth` in the user site of every Python version the sandbox might hold (HOME=/app)."""
    return (
        "for v in 3.9 3.10 3.11 3.12 3.13; do d=/app/.local/lib/python$v/site-packages; "
        f'mkdir -p $d && echo "{FORGE_PTH}" > $d/srbench-evil.pth; done'
    )


ENTRY_POINT = [
    plant("/app/evilplug.py", FORGE),
    plant("/app/evil-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: evil\nVersion: 1.0"),
    plant("/app/evil-1.0.dist-info/entry_points.txt", "[pytest11]\nevil = evilplug"),
]
CONFIG = [
    plant("/app/conftest.py", FORGE),
    plant("/app/evilplug.py", FORGE),
    plant("/app/pytest.ini", "[pytest]\naddopts = --co -p evilplug"),
    plant("/app/pyproject.toml", "[tool.pytest.ini_options]\naddopts = '--co -p evilplug'"),
    plant("/app/tox.ini", "[pytest]\naddopts = --co -p evilplug"),
    plant("/app/setup.cfg", "[tool:pytest]\naddopts = --co -p evilplug"),
    plant("/app/pytest.toml", "[pytest]\naddopts = ['--co', '-p', 'evilplug']"),
    plant("/app/.bashrc", FORGE_SHELL),
    plant("/app/.profile", FORGE_SHELL),
    plant("/app/logs/verifier/reward.txt", "1"),
    plant("/app/reward.txt", "1"),
    plant("/app/bin/python3", f"#!/bin/sh\n{FORGE_SHELL}"),
    "chmod +x /app/bin/python3 && cp /app/bin/python3 /app/python3 && cp /app/bin/python3 /app/pytest"
    " && mkdir -p /app/.local/bin && cp /app/bin/python3 /app/.local/bin/",
    user_site_pth(),
]
# The program fix-broken-script's tests run (`python3 median.py`), written to forge instead of
# to work: one writes reward 1 and makes the file read-only, so test.sh's own `echo 0 >` is
# refused; one leaves a daemon writing 1 over whatever test.sh writes until the sandbox ends.
LOCK_REWARD = """import os
os.makedirs("/logs/verifier", exist_ok=True)
with open("/logs/verifier/reward.txt", "w") as reward:
    reward.write("1")
os.chmod("/logs/verifier/reward.txt", 0o444)
print("wrong")
"""
DAEMON_REWARD = """import os
import time
if os.fork() == 0:
    os.setsid()
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(quiet, fd)
    end = time.time() + 10
    while time.time() < end:
        try:
            with open("/logs/verifier/reward.txt", "w") as reward:
                reward.write("1")
        except OSError:
            pass
        time.sleep(0.001)
    os._exit(0)
print("wrong")
"""
# name -> (commands, a file that must exist at the end)
ATTACKS: dict[str, tuple[list[str], str]] = {
    "pytest-module": ([plant("/app/pytest.py", FORGE)], "/app/pytest.py"),
    "pytest-internals": ([plant("/app/_pytest/__init__.py", FORGE)], "/app/_pytest/__init__.py"),
    "pluggy": ([plant("/app/pluggy/__init__.py", FORGE)], "/app/pluggy/__init__.py"),
    "iniconfig": ([plant("/app/iniconfig.py", FORGE)], "/app/iniconfig.py"),
    "stdlib-module": ([plant("/app/argparse.py", FORGE)], "/app/argparse.py"),
    # Imported by the standard library only where it exists (platform, getpass): a planted one
    # is found wherever /app is on sys.path, even last.
    "optional-import": (
        [plant("/app/_wmi.py", FORGE), plant("/app/msvcrt.py", FORGE)],
        "/app/msvcrt.py",
    ),
    "compiled-module": (
        [
            plant("/app/forge_src.py", FORGE),
            'python3 -c "import py_compile; '
            "py_compile.compile('/app/forge_src.py', cfile='/app/pytest.pyc', doraise=True)\""
            " && rm /app/forge_src.py",
        ],
        "/app/pytest.pyc",
    ),
    "plugin-entry-point": (ENTRY_POINT, "/app/evil-1.0.dist-info/entry_points.txt"),
    "configuration": (CONFIG, "/app/.local/lib/python3.12/site-packages/srbench-evil.pth"),
    # Modules a Python imports at start-up from a PYTHONPATH the test script sets: the session
    # is not verified at all (runs/engine/startup_plants.py).
    "startup-modules": (
        [
            plant(f"/app/{name}", FORGE)
            for name in ("sitecustomize.py", "usercustomize.py", "re.py")
        ],
        "/app/re.py",
    ),
    "program-locks-reward": ([plant("/app/median.py", LOCK_REWARD)], "/app/median.py"),
    "program-leaves-a-daemon": ([plant("/app/median.py", DAEMON_REWARD)], "/app/median.py"),
}
PYTEST_TASKS = ("csv-column-sum", "fix-broken-script")


def system_python_task() -> LoadedQuestion:
    """A Harbor task whose verifier checks the answer with the system's Python (not a venv: it
    reads the user site under HOME, which is /app)."""
    test_sh = (
        "cd /app\nmkdir -p /logs/verifier\n"
        "if /usr/bin/python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt;"
        " else echo 0 > /logs/verifier/reward.txt; fi\n"
    )
    check = "import sys\nsys.exit(0 if open('/app/answer.txt').read() == '42\\n' else 1)\n"
    payload = {
        "task_id": "answer-with-system-python",
        "format": "harbor",
        "instruction": "Write the number 42 and a newline to `answer.txt`.",
        "difficulty": "easy",
        "category": "fixture",
        "tags": [],
        "agent_timeout_sec": None,
        "verifier_timeout_sec": 60.0,
        "environment": {"docker_image": None, "allow_internet": False, "local_compatible": True},
        "environment_files": [],
        "tools": [TERMINAL_TOOL],
    }
    secret = {
        "tests": [
            {"path": "tests/test.sh", "content": test_sh},
            {"path": "tests/check.py", "content": check},
        ],
        "solution": [{"path": "solution/solve.sh", "content": "echo 42 > answer.txt\n"}],
        "test_command": "bash /tests/test.sh",
    }
    return LoadedQuestion("terminal-bench", payload["task_id"], "easy", payload, secret)


def variant(task: LoadedQuestion, attack: str, key: AnswerKey) -> LoadedQuestion:
    """The task under its own name and instruction (the simulator finds a task by its opening
    message), whose "solution" is the attack's commands."""
    name = f"{task.native_id}--{attack}"
    payload = {
        **task.payload,
        "task_id": name,
        "instruction": f"{task.payload['instruction']}\n\n(variant {attack})",
    }
    commands, planted = ATTACKS[attack]
    script = "\n".join([*commands, f"test -e {planted} && echo planted-{attack}"])
    adapter = get_adapter("terminal-bench")
    text = first_user_text(adapter.messages(payload))
    assert text is not None
    solution = [{"path": "solution/solve.sh", "content": script}]
    key.add(text, "terminal-bench", "agent", {**task.secret, "solution": solution}, payload)
    return dataclasses.replace(task, native_id=name, payload=payload)


def test_files_an_agent_plants_never_run_in_the_verifier_and_it_scores_zero(celery_worker):
    adapter = get_adapter("terminal-bench")
    tasks = {q.native_id: q for q in adapter.load(adapter.fixture_path())}
    key = AnswerKey()
    questions = [variant(tasks[t], attack, key) for attack in ATTACKS for t in PYTEST_TASKS]
    questions.append(variant(system_python_task(), "configuration", key))
    dataset = es.questions_dataset(questions, name="planted", benchmarks=["terminal-bench"])
    run = es.keyed_run(key, dataset, "planted-verifier", timeout=600)
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])

    cells = {c.question.native_id: c for c in Cell.objects.filter(run=run)}
    assert len(cells) == len(questions)
    forged = sorted(name for name, cell in cells.items() if cell.correct is not False)
    assert forged == [], forged
    for name, cell in cells.items():
        attack = name.split("--")[1]
        told = json.dumps([c.request for c in Call.objects.filter(cell=cell)], ensure_ascii=False)
        assert f"planted-{attack}" in told, name  # every file was planted
        detail = cell.grade["detail"]
        if attack == "startup-modules":
            assert detail["reward_source"] == "startup_module_planted", (name, detail)
            assert detail["startup_modules"] == ["re.py", "sitecustomize.py", "usercustomize.py"]
            continue
        # The task's own check ran and failed: pytest reports its failures, the system Python
        # its missing answer file.
        tail = detail["verifier_output_tail"]
        assert "failed" in tail or "answer.txt" in tail, (name, tail)
        if name.startswith("csv-column-sum"):
            assert detail["reward_source"] == "exit_code" and detail["verifier_exit_code"] == 1
        else:
            assert detail["reward_source"] == "reward.txt" and detail["reward"] == 0.0, name
