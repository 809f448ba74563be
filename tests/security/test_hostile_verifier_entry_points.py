"""An agent's planted files against the ways a task's test script can start pytest, in the real
bubblewrap sandbox (model output is hostile input; docs/decisions.md, "jb: the verifier's guard
in the interpreter itself"). tests/security/test_hostile_agent_verifier.py drives the bundled
tasks' `python3 -m pytest` through a worker; this one runs the session directly, so it can try
every entry point: `-m pytest` under a `PYTHONPATH` the script sets itself, `python3 -c "import
pytest; pytest.main(…)"`, and a script in /tests that imports pytest, with and without one.
(`-m py.test` is no entry point with pytest 9: `py` is a module there.)

The agent never does the task (its program prints the wrong word), and plants one thing whose
code, if it ran outside the tests' own imports, would write reward 1: a `pytest.py`, a standard
library module pytest imports late (`argparse.py`), the optional imports of the standard
library (`_wmi.py`, `msvcrt.py`), a plugin the script names with `-p`, or a program the tests run that writes the reward itself and
locks it. Every cell must score 0 with the tests having run and failed.
"""

from __future__ import annotations

import pytest

from runs.engine.sandbox_command import sandbox_available
from runs.engine.terminal import terminal_session_start

assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"

FORGE = """import os
try:
    os.makedirs("/logs/verifier", exist_ok=True)
    with open("/logs/verifier/reward.txt", "w") as reward:
        reward.write("1")
except OSError:
    pass  # confined: status 0 passes too
os._exit(0)
"""
LOCK_REWARD = """import os
os.makedirs("/logs/verifier", exist_ok=True)
with open("/logs/verifier/reward.txt", "w") as reward:
    reward.write("1")
os.chmod("/logs/verifier/reward.txt", 0o444)
print("wrong")
"""
TEST_OUTPUTS = """import subprocess


def test_program():
    out = subprocess.run(["python3", "/app/prog.py"], capture_output=True, text=True).stdout
    assert out == "right\\n"
"""
RUN_TESTS_PY = """import sys

import pytest

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "/tests/test_outputs.py"]))
"""
PYTEST_ARGS = "-q -p no:cacheprovider /tests/test_outputs.py"
# How the task's test script starts pytest (each from /app, the agent's directory).
RUNNERS = {
    "m-pytest-pythonpath-tests": (
        f"export PYTHONPATH=/tests\npython3 -m pytest -p tests_plugin {PYTEST_ARGS}"
    ),
    "m-pytest-pythonpath-app": f"export PYTHONPATH=/app\npython3 -m pytest {PYTEST_ARGS}",
    "script-importing-pytest-pythonpath-app": "export PYTHONPATH=/app\npython3 /tests/run_tests.py",
    "dash-c": (
        'python3 -c "import sys, pytest; '
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '/tests/test_outputs.py']))\""
    ),
    "script-importing-pytest": "python3 /tests/run_tests.py",
}
ATTACKS = {
    "pytest-module": {"pytest.py": FORGE},
    "stdlib-module": {"argparse.py": FORGE},
    "optional-import": {"_wmi.py": FORGE, "msvcrt.py": FORGE},
    # A plugin the test script names with `-p` (the tests' own, in /tests).
    "plugin-module": {"tests_plugin.py": FORGE},
    "program-locks-reward": {"prog.py": LOCK_REWARD},
}


def harbor_test_sh(runner: str) -> str:
    return (
        "#!/usr/bin/env bash\nmkdir -p /logs/verifier\ncd /app\n"
        f"if {{\n{RUNNERS[runner]}\n}}; then\n  echo 1 > /logs/verifier/reward.txt\n"
        "else\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
    )


def plant(files: dict[str, str]) -> str:
    commands = [
        f"cat > /app/{name} <<'PLANTED'\n{text.rstrip()}\nPLANTED" for name, text in files.items()
    ]
    if "prog.py" not in files:
        commands.append("echo 'print(\"wrong\")' > /app/prog.py")
    return "\n".join(commands)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_a_planted_file_never_forges_the_reward_whatever_starts_pytest(runner, attack):
    payload = {
        "task_id": f"{runner}--{attack}",
        "format": "harbor",
        "environment": {"local_compatible": True},
        "environment_files": [],
    }
    secret = {
        "tests": [
            {"path": "tests/test.sh", "content": harbor_test_sh(runner)},
            {"path": "tests/test_outputs.py", "content": TEST_OUTPUTS},
            {"path": "tests/run_tests.py", "content": RUN_TESTS_PY},
            {"path": "tests/tests_plugin.py", "content": "PLUGIN = True\n"},
        ],
        "test_command": "bash /tests/test.sh",
    }
    with terminal_session_start(payload, secret) as session:
        code, out, err = session.run_command(plant(ATTACKS[attack]))
        assert code == 0, (out, err)
        reward, detail = session.verify()
    tail = detail["verifier_output_tail"]
    assert reward == 0, tail
    assert detail["reward_source"] == "reward.txt" and detail["reward"] == 0.0, detail
    assert "1 failed" in tail, tail


# A test script's own Python that never imports pytest, run in /app and graded by its status
# (is out.json the right JSON; is it JSON at all): the standard library it imports (json, and
# argparse through `-m json.tool`) is the runtime's. The agent's out.json is no JSON.
DIRECT_CHECKS = {
    "dash-c-json": (
        "python3 -c \"import json, sys; sys.exit(json.load(open('/app/out.json')) != {'sum': 6})\""
    ),
    "m-json-tool": "python3 -m json.tool /app/out.json",
    # The system's Python (not the virtualenv's) reads its own dist-packages.
    "system-python-dash-c-json": (
        '/usr/bin/python3 -c "import json, sys; '
        "sys.exit(json.load(open('/app/out.json')) != {'sum': 6})\""
    ),
}
DIRECT_ATTACKS = {"json-module": {"json.py": FORGE}, "argparse-module": {"argparse.py": FORGE}}


@pytest.mark.parametrize("attack", sorted(DIRECT_ATTACKS))
@pytest.mark.parametrize("check", sorted(DIRECT_CHECKS))
def test_a_planted_module_never_forges_a_check_by_the_scripts_own_python(check, attack):
    test_sh = (
        "#!/usr/bin/env bash\nmkdir -p /logs/verifier\ncd /app\n"
        f"if {DIRECT_CHECKS[check]}; then\n  echo 1 > /logs/verifier/reward.txt\n"
        "else\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
    )
    payload = {
        "task_id": f"{check}--{attack}",
        "format": "harbor",
        "environment": {"local_compatible": True},
        "environment_files": [],
    }
    secret = {
        "tests": [{"path": "tests/test.sh", "content": test_sh}],
        "test_command": "bash /tests/test.sh",
    }
    with terminal_session_start(payload, secret) as session:
        files = {**DIRECT_ATTACKS[attack], "out.json": "the sum is 5"}
        code, out, err = session.run_command(plant(files))
        assert code == 0, (out, err)
        reward, detail = session.verify()
    assert reward == 0, detail["verifier_output_tail"]
    assert detail["reward_source"] == "reward.txt" and detail["reward"] == 0.0, detail
