"""A Terminal-Bench agent's module that a test script's Python would import at start-up
(runs/engine/startup_plants.py; model output is hostile input). With `PYTHONPATH=/app` set by
the task's own test script, a planted `/app/encodings/__init__.py` or `sitecustomize.py` runs
before anything of ours in every Python the script starts, and `os._exit(0)` there passed every
check (docs/decisions.md, "Left open" of jb's section). Such a session is not verified now;
an honest solution with packages and data directories of the same names is verified as before.
"""

from __future__ import annotations

import io
import json
import shlex
import tarfile
from pathlib import Path

import pytest

from runs.engine.sandbox_command import sandbox_available
from runs.engine.startup_plants import EDITABLE_PREFIX, STARTUP_MODULES, startup_plants
from runs.engine.terminal import terminal_session_start
from runs.interfaces.public import grade_reasons, public_grade
from tests.security.test_hostile_verifier_entry_points import (
    FORGE,
    PYTEST_ARGS,
    RUN_TESTS_PY,
    TEST_OUTPUTS,
)

assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"

RIGHT = 'print("right")\n'
WRONG = 'print("wrong")\n'


def _session(test_sh: str, task_id: str):
    payload = {
        "task_id": task_id,
        "format": "harbor",
        "environment": {"local_compatible": True},
        "environment_files": [],
    }
    secret = {
        "tests": [
            {"path": "tests/test.sh", "content": test_sh},
            {"path": "tests/test_outputs.py", "content": TEST_OUTPUTS},
            {"path": "tests/run_tests.py", "content": RUN_TESTS_PY},
            {"path": "tests/tests_plugin.py", "content": "PLUGIN = True\n"},
        ],
        "test_command": "bash /tests/test.sh",
    }
    return terminal_session_start(payload, secret)


def _write(files: dict[str, str]) -> str:
    lines = []
    for name, text in files.items():
        parent = str(Path(name).parent)
        if parent != ".":
            lines.append(f"mkdir -p /app/{parent}")
        lines.append(f"cat > /app/{name} <<'PLANTED'\n{text.rstrip()}\nPLANTED")
    return "\n".join(lines)


# test.sh variants that put an agent's directory on PYTHONPATH (Harbor's is /app).
PYTHONPATH_RUNNERS = {
    "m-pytest-app": f"export PYTHONPATH=/app\npython3 -m pytest {PYTEST_ARGS}",
    "script-app": "export PYTHONPATH=/app\npython3 /tests/run_tests.py",
    "m-pytest-app-src": f"export PYTHONPATH=/app/src\npython3 -m pytest {PYTEST_ARGS}",
}
PLANTS = {
    "encodings-package": ("encodings/__init__.py", "encodings"),
    "encodings-module": ("encodings.py", "encodings.py"),
    "sitecustomize": ("sitecustomize.py", "sitecustomize.py"),
    "re-module": ("re.py", "re.py"),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
@pytest.mark.parametrize("runner", sorted(PYTHONPATH_RUNNERS))
def test_a_planted_startup_module_is_not_verified(runner, plant):
    path, reported = PLANTS[plant]
    if runner.endswith("-src"):
        path, reported = f"src/{path}", f"src/{reported}"
    with _session(harbor_test_sh_with(runner), f"{runner}--{plant}") as session:
        code, out, err = session.run_command(_write({path: FORGE, "prog.py": WRONG}))
        assert code == 0, (out, err)
        reward, detail = session.verify()
    assert reward == 0, detail
    assert detail["reward_source"] == "startup_module_planted", detail
    assert detail["verifier_reason"] == "startup_module_planted"
    assert detail["startup_modules"] == [reported]
    grade = {"grader": "terminal-bench", "reward": 0, "steps": 1, "detail": detail}
    words = grade_reasons(public_grade(grade))
    assert any("start-up" in w for w in words), words


def harbor_test_sh_with(runner: str) -> str:
    return (
        "#!/usr/bin/env bash\nmkdir -p /logs/verifier\ncd /app\n"
        f"if {{\n{PYTHONPATH_RUNNERS[runner]}\n}}; then\n  echo 1 > /logs/verifier/reward.txt\n"
        "else\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
    )


@pytest.mark.parametrize("runner", sorted(PYTHONPATH_RUNNERS))
def test_honest_packages_and_data_directories_of_those_names_are_verified(runner):
    files = {
        "prog.py": RIGHT,
        # A package's own modules are imported by their dotted names only.
        "mylib/__init__.py": "",
        "mylib/types.py": "X = 1\n",
        "src/mylib/__init__.py": "",
        "src/mylib/re.py": "Y = 2\n",
        # Data directories without an __init__ never shadow a standard-library package.
        "collections/items.json": "[]\n",
        "encodings/notes.txt": "utf-8\n",
        "re": "a file with no module suffix\n",
    }
    with _session(harbor_test_sh_with(runner), f"honest--{runner}") as session:
        code, out, err = session.run_command(_write(files))
        assert code == 0, (out, err)
        reward, detail = session.verify()
    assert detail["reward_source"] == "reward.txt", detail
    assert reward == 1, detail["verifier_output_tail"]


def _archive(tmp_path: Path, members: list[tuple[str, str]]) -> Path:
    """A snapshot archive as the sandbox's tar writes it (`./` names)."""
    path = tmp_path / "app.tar"
    with tarfile.open(path, "w") as tar:
        for name, kind in members:
            info = tarfile.TarInfo(f"./{name}")
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = "/tests"
                tar.addfile(info)
            else:
                tar.addfile(info, io.BytesIO(b""))
    return path


def test_what_counts_as_planted(tmp_path):
    members = [
        (".", "dir"),
        ("types.py", "file"),
        ("math.cpython-312-x86_64-linux-gnu.so", "file"),
        ("functools.pyc", "file"),
        ("pathlib", "link"),
        ("__editable___x_1_0_finder.py", "file"),
        ("lib", "dir"),
        ("lib/deep", "dir"),
        ("lib/deep/warnings.py", "file"),
        ("pkg", "dir"),
        ("pkg/__init__.py", "file"),
        ("pkg/enum.py", "file"),
        ("pkg/sub", "dir"),
        ("pkg/sub/re.py", "file"),
        ("urllib", "dir"),
        ("urllib/__init__.pyc", "file"),
        ("collections", "dir"),
        ("collections/a.json", "file"),
        ("re", "file"),
        ("retry.py", "file"),
        ("operator.txt", "file"),
    ]
    assert startup_plants(_archive(tmp_path, members)) == [
        "__editable___x_1_0_finder.py",
        "functools.pyc",
        "lib/deep/warnings.py",
        "math.cpython-312-x86_64-linux-gnu.so",
        "pathlib",
        "types.py",
        "urllib",
    ]


@pytest.mark.parametrize("python", ["python3", "/usr/bin/python3"])
def test_the_list_covers_what_the_sandboxs_pythons_import_at_start_up(python):
    """Every module the sandbox's Pythons import from the path before a script runs (not frozen,
    not built in) is on the list: a runtime that imports one more makes this fail."""
    probe = (
        "import sys; names = dict(sys.modules); import json; "
        "print(json.dumps(sorted({n.split('.')[0] for n, m in names.items() "
        "if getattr(getattr(m, '__spec__', None), 'origin', None) not in "
        "(None, 'frozen', 'built-in')})))"
    )
    with _session("exit 0\n", f"probe--{python}") as session:
        code, out, err = session.run_command(f"{python} -c {shlex.quote(probe)}")
    assert code == 0, (out, err)
    imported = set(json.loads(out))
    assert "encodings" in imported  # the probe sees start-up imports at all
    missing = {
        n for n in imported if n not in STARTUP_MODULES and not n.startswith(EDITABLE_PREFIX)
    }
    assert missing == set(), missing
