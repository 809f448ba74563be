"""Honest Terminal-Bench tasks whose tests import code keep passing in the local sandbox now that
the verifier's pytest no longer imports from the agent's /app ahead of everything
(runs/engine/verifier_site/srbench_guard.py), however the test script starts it (`-m pytest`,
`-c "import pytest; …"`, under a PYTHONPATH of its own): a helper beside the tests in /tests,
the module the task asks for in /app (by the working directory, by an explicit sys.path entry,
through `pytest.importorskip`), a module of /app importing its neighbour, and a program the
tests run whose modules sit beside it — one of them named like a standard library module, which
Python lets it shadow. Each task also fails without its solution, so its pass is the
solution's."""

from __future__ import annotations

from typing import Any

import pytest

from runs.engine.sandbox_command import sandbox_available
from runs.engine.terminal import terminal_session_start

assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"

HARBOR_TEST_SH = """#!/usr/bin/env bash
mkdir -p /logs/verifier
cd /app
if {pytest}; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
PYTEST_ARGS = "-q -p no:cacheprovider /tests/test_outputs.py"
# How a Harbor test script starts pytest (the guard acts wherever pytest is imported, under any
# PYTHONPATH the script sets: runs/engine/verifier_site/srbench_guard.py).
RUNNERS = {
    "m-pytest": f"python3 -m pytest {PYTEST_ARGS}",
    "dash-c": (
        'python3 -c "import sys, pytest; '
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '/tests/test_outputs.py']))\""
    ),
    "pythonpath-tests": f"PYTHONPATH=/tests python3 -m pytest {PYTEST_ARGS}",
    "pythonpath-app": f"PYTHONPATH=/app python3 -m pytest {PYTEST_ARGS}",
}
LEGACY_RUN_TESTS = '#!/usr/bin/env bash\npython3 -m pytest -rA "$TEST_DIR/test_outputs.py"\n'

SHADOW_STDLIB = """import statistics  # /app/statistics.py, beside main.py: it shadows the standard one
from util import double

print(double(statistics.middle([3, 1, 2])))
"""
TASKS: dict[str, dict[str, Any]] = {
    "helper-beside-the-tests": {
        "tests": {
            "helpers.py": "EXPECTED = '6\\n'\n",
            "test_outputs.py": (
                "from pathlib import Path\n\nfrom helpers import EXPECTED\n\n\n"
                "def test_out():\n    assert Path('out.txt').read_text() == EXPECTED\n"
            ),
        },
        "solution": "echo 6 > out.txt",
    },
    "module-in-the-working-directory": {
        "tests": {
            "test_outputs.py": (
                "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
            ),
        },
        "solution": "printf 'def add(a, b):\\n    return a + b\\n' > calc.py",
    },
    "module-by-an-explicit-path": {
        "tests": {
            "test_outputs.py": (
                "import sys\n\nsys.path.insert(0, '/app')\n\nimport calc  # noqa: E402\n\n\n"
                "def test_add():\n    assert calc.add(2, 3) == 5\n"
            ),
        },
        "solution": "printf 'def add(a, b):\\n    return a + b\\n' > calc.py",
    },
    "module-through-importorskip": {
        "tests": {
            "test_outputs.py": (
                "import pytest\n\ncalc = pytest.importorskip('calc')\n\n\n"
                "def test_add():\n    assert calc.add(2, 3) == 5\n"
            ),
        },
        "solution": "printf 'def add(a, b):\\n    return a + b\\n' > calc.py",
    },
    "module-importing-its-neighbour": {
        "tests": {
            "test_outputs.py": (
                "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
            ),
        },
        "solution": (
            "printf 'def plus(a, b):\\n    return a + b\\n' > arith.py && "
            "printf 'from arith import plus as add\\n' > calc.py"
        ),
    },
    "program-with-modules-beside-it": {
        "tests": {
            "test_outputs.py": (
                "import subprocess\n\n\ndef test_main():\n    out = subprocess.run(\n"
                "        ['python3', '/app/main.py'], capture_output=True, text=True, check=True\n"
                "    ).stdout\n    assert out == '4\\n'\n"
            ),
        },
        "solution": (
            "printf 'def double(x):\\n    return 2 * x\\n' > util.py && "
            "printf 'def middle(v):\\n    return sorted(v)[len(v) // 2]\\n' > statistics.py && "
            f"cat > main.py <<'EOF'\n{SHADOW_STDLIB}EOF"
        ),
    },
    # The tests and the program they run write where a test may (pytest's tmp_path in /tmp,
    # /app): the confinement of what pytest runs leaves these alone (only /logs is refused).
    "tests-writing-scratch-files": {
        "tests": {
            "test_outputs.py": (
                "import subprocess\nfrom pathlib import Path\n\n\n"
                "def test_sum(tmp_path):\n"
                "    (tmp_path / 'in.txt').write_text('3 1 2')\n"
                "    Path('/app/scratch.txt').write_text('x')\n"
                "    subprocess.run(\n"
                "        ['python3', '/app/total.py', str(tmp_path / 'in.txt')], check=True\n"
                "    )\n"
                "    assert Path('/app/total.txt').read_text() == '6\\n'\n"
            ),
        },
        "solution": (
            "cat > total.py <<'EOF'\nimport sys\n\n"
            "numbers = open(sys.argv[1]).read().split()\n"
            "open('/tmp/work.txt', 'w').write('scratch')\n"
            "open('/app/total.txt', 'w').write(f'{sum(map(int, numbers))}\\n')\nEOF"
        ),
    },
}


def task(
    name: str, *, legacy: bool, runner: str = "m-pytest"
) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = TASKS[name]
    tests = [{"path": f"tests/{path}", "content": text} for path, text in spec["tests"].items()]
    if legacy:
        tests.append({"path": "run-tests.sh", "content": LEGACY_RUN_TESTS})
    else:
        test_sh = HARBOR_TEST_SH.format(pytest=RUNNERS[runner])
        tests.append({"path": "tests/test.sh", "content": test_sh})
    payload = {
        "task_id": name,
        "format": "legacy" if legacy else "harbor",
        "environment": {"local_compatible": True},
        "environment_files": [],
    }
    secret = {
        "tests": tests,
        "test_command": "bash /tests/run-tests.sh" if legacy else "bash /tests/test.sh",
    }
    return payload, secret


@pytest.mark.parametrize(
    ("legacy", "runner"),
    [(False, runner) for runner in RUNNERS] + [(True, "m-pytest")],
    ids=[f"harbor-{runner}" for runner in RUNNERS] + ["legacy"],
)
@pytest.mark.parametrize("name", sorted(TASKS))
def test_an_honest_task_whose_tests_import_code_passes_with_its_solution_only(name, legacy, runner):
    payload, secret = task(name, legacy=legacy, runner=runner)
    with terminal_session_start(payload, secret) as session:
        unsolved, _ = session.verify()
    with terminal_session_start(payload, secret) as session:
        code, out, err = session.run_command(TASKS[name]["solution"])
        assert code == 0, (out, err)
        solved, detail = session.verify()
    assert (unsolved, solved) == (0, 1), detail["verifier_output_tail"]


# A test script's own Python that never imports pytest, graded by its status: it still imports
# the task's module from /app, runs a module of /app with `-m`, runs the agent's program whose
# modules sit beside it (one named like the standard library's) — under the guard, which gives
# the runtime's modules first only to the script's own Python, never to the agent's program.
DIRECT_CHECKS: dict[str, tuple[str, str]] = {
    "dash-c-importing-the-task-module": (
        'python3 -c "import sys; from calc import add; sys.exit(add(2, 3) != 5)"',
        "printf 'def add(a, b):\\n    return a + b\\n' > calc.py",
    ),
    "system-python-dash-c-importing-the-task-module": (
        '/usr/bin/python3 -c "import sys; from calc import add; sys.exit(add(2, 3) != 5)"',
        "printf 'def add(a, b):\\n    return a + b\\n' > calc.py",
    ),
    "m-running-a-module-of-app": (
        'test "$(python3 -m answer)" = 42',
        "echo 'print(42)' > answer.py",
    ),
    "program-with-modules-beside-it": (
        'test "$(python3 /app/main.py)" = 4',
        TASKS["program-with-modules-beside-it"]["solution"],
    ),
}


@pytest.mark.parametrize("name", sorted(DIRECT_CHECKS))
def test_an_honest_check_by_the_scripts_own_python_passes_with_its_solution_only(name):
    check, solution = DIRECT_CHECKS[name]
    test_sh = (
        "#!/usr/bin/env bash\nmkdir -p /logs/verifier\ncd /app\n"
        f"if {check}; then\n  echo 1 > /logs/verifier/reward.txt\n"
        "else\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
    )
    payload = {
        "task_id": name,
        "format": "harbor",
        "environment": {"local_compatible": True},
        "environment_files": [],
    }
    secret = {
        "tests": [{"path": "tests/test.sh", "content": test_sh}],
        "test_command": "bash /tests/test.sh",
    }
    with terminal_session_start(payload, secret) as session:
        unsolved, _ = session.verify()
    with terminal_session_start(payload, secret) as session:
        code, out, err = session.run_command(solution)
        assert code == 0, (out, err)
        solved, detail = session.verify()
    assert (unsolved, solved) == (0, 1), detail["verifier_output_tail"]
