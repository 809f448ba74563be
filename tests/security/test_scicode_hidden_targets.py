"""A SciCode reply can never read the step's hidden targets, nor decide its own tests (R9.3).

Upstream runs a step as one program: the model's code, then `targets = process_hdf5_to_tuple(…)`
and the test snippets, which assert against `target`. Everything the tests hold was therefore
reachable by the code under test: the globals `target`/`targets` (directly, through the
caller's frame, `inspect`, `gc`), the HDF5 file by its path, the test source, `numpy.allclose`
and the comparison helpers (monkeypatched to say yes), and the word the grader handed on stdin
to prove the tests ran. Each attack below scored the fixture problems correct without computing
anything. The grader now runs the model's code and the tests' calls with no target anywhere in
that process, and compares the values the calls returned against the targets in a second
process that runs no model code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from datasets.benchmarks import get_adapter
from datasets.scicode_fixture_data import write_fixture_test_data
from runs.engine.code_grading import grade_scicode
from runs.engine.sandbox_command import SandboxLimits, sandbox_available

assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"

FAST = SandboxLimits(wall_s=20.0, cpu_s=10.0, memory_bytes=1024**3)

# `{name}` is the step's function, `{step}` its number (both in the prompt a model is shown).
# Each body computes nothing: whatever passes, passes because of what it read or changed.
ATTACKS = {
    "target from the caller's globals": (
        "def {name}(*args, **kwargs):\n"
        "    import sys\n"
        "    return sys._getframe(1).f_globals['target']\n"
    ),
    "target from inspect.stack": (
        "def {name}(*args, **kwargs):\n"
        "    import inspect\n"
        "    return inspect.stack()[1].frame.f_globals['target']\n"
    ),
    "target from gc": (
        "def {name}(*args, **kwargs):\n"
        "    import gc\n"
        "    for o in gc.get_objects():\n"
        "        if isinstance(o, dict) and 'targets' in o and 'target' in o:\n"
        "            return o['target']\n"
    ),
    "targets read from the HDF5 file by path": (
        "_calls = []\n"
        "def {name}(*args, **kwargs):\n"
        "    import glob, h5py\n"
        "    _calls.append(1)\n"
        "    for path in glob.glob('/data/*') + glob.glob('/app/**/*.h5', recursive=True):\n"
        "        try:\n"
        "            with h5py.File(path, 'r') as f:\n"
        "                g = f['{step}/test%d' % len(_calls)]\n"
        "                values = [g[k][()] for k in sorted(g)]\n"
        "                return values[0] if len(values) == 1 else tuple(values)\n"
        "        except Exception:\n"
        "            pass\n"
    ),
    "numpy.allclose patched to say yes": (
        "import numpy\nnumpy.allclose = lambda *a, **k: True\n"
        "def {name}(*args, **kwargs):\n    return 0.0\n"
    ),
    "comparison helpers patched to say yes": (
        "import numpy, scicode.compare.cmp as c\n"
        "numpy.allclose = numpy.isclose = lambda *a, **k: True\n"
        "c.cmp_tuple_or_list = c.are_dicts_close = lambda *a, **k: True\n"
        "def {name}(*args, **kwargs):\n    return 0.0\n"
    ),
    "AssertionError swallowed by the excepthook": (
        "import os, sys\n"
        "_word = sys.stdin.read()\n"
        "def _hook(*a):\n"
        "    sys.__stdout__.write('\\n' + _word.strip() + '\\n'); sys.__stdout__.flush()\n"
        "    os._exit(0)\n"
        "sys.excepthook = _hook\n"
        "def {name}(*args, **kwargs):\n    return 0.0\n"
    ),
    "the end-of-tests word read from stdin before the tests": (
        "import os, sys\nprint(sys.stdin.read().strip())\nsys.stdout.flush()\nos._exit(0)\n"
    ),
    "the end-of-tests word read from /proc/self/fd/0": (
        "import os\nprint(open('/proc/self/fd/0').read().strip(), flush=True)\nos._exit(0)\n"
    ),
    # Upstream's own hole: np.allclose(np.array([]), 2.5) is True (broadcast to nothing).
    "an empty array, close to any number": (
        "def {name}(*args, **kwargs):\n    return np.array([])\n"
    ),
    "a values file forged, then an early exit": (
        "import os, srbench_values\n"
        "r = srbench_values.Recorder(1 << 20)\n"
        "for t in range(4):\n"
        "    for s in range(4):\n"
        "        r.add(t, s, [0.0])\n"
        "open('/app/values.bin', 'wb').write(r.dump())\n"
        "os._exit(0)\n"
    ),
}


def scicode_questions():
    adapter = get_adapter("scicode")
    return list(adapter.load(adapter.fixture_path()))


def hostile_replies(question, body: str) -> list[str]:
    replies = []
    for step in question.payload["sub_steps"]:
        name = re.match(r"\s*def\s+(\w+)", step["function_header"])[1]
        code = body.replace("{name}", name).replace("{step}", step["step_number"])
        replies.append(f"```python\n{code}```")
    return replies


@pytest.fixture(scope="module")
def h5(tmp_path_factory) -> Path:
    return write_fixture_test_data(tmp_path_factory.mktemp("scicode") / "test_data.h5")


@pytest.mark.parametrize("body", ATTACKS.values(), ids=ATTACKS.keys())
def test_a_reply_that_computes_nothing_passes_no_step(body: str, h5: Path):
    for q in scicode_questions():
        grade = grade_scicode(
            step_replies=hostile_replies(q, body),
            payload=q.payload,
            secret=q.secret,
            h5_path=h5,
            limits=FAST,
        )
        assert grade["steps_passed"] == 0, (q.native_id, grade)
        assert grade["correct"] is False
