"""The fixture SciCode targets grade reference solutions correct and a wrong step incorrect
(so a demo or test run of SciCode is graded for real, not failed for missing data)."""

from datasets.benchmarks import get_adapter
from datasets.scicode_fixture_data import write_fixture_test_data
from runs.engine.code_grading import grade_scicode

SOLUTIONS = {
    "901": [
        "def time_of_flight(v0, theta, g):\n    return 2 * v0 * np.sin(theta) / g\n",
        "def projectile_range(v0, theta, g):\n    return v0 * np.cos(theta) * time_of_flight(v0, theta, g)\n",
    ],
    "902": [
        "def parent_population(N0, lambda_a, t):\n    return N0 * np.exp(-lambda_a * t)\n",
        "def daughter_population(N0, lambda_a, lambda_b, t):\n"
        "    return N0 * lambda_a / (lambda_b - lambda_a) * (np.exp(-lambda_a * t) - np.exp(-lambda_b * t))\n",
        "def time_of_max_daughter(lambda_a, lambda_b):\n"
        "    return np.log(lambda_a / lambda_b) / (lambda_a - lambda_b)\n",
    ],
    "903": [
        "def sample_mean(x):\n    return float(np.mean(x))\n",
        "def sample_variance(x):\n    m = sample_mean(x)\n    return float(np.sum((x - m) ** 2) / (len(x) - 1))\n",
        "def standard_error(x):\n    return float(np.sqrt(sample_variance(x) / len(x)))\n",
        "def mean_interval(x):\n    m, se = sample_mean(x), standard_error(x)\n"
        "    return (m - 1.959964 * se, m + 1.959964 * se)\n",
    ],
}


def reply(code: str) -> str:
    return f"```python\n{code}```"


def test_reference_solutions_pass_and_a_wrong_step_fails(tmp_path):
    h5 = write_fixture_test_data(tmp_path / "test_data.h5")
    adapter = get_adapter("scicode")
    questions = {q.native_id: q for q in adapter.load(adapter.fixture_path())}
    assert set(questions) == set(SOLUTIONS)
    for native_id, steps in SOLUTIONS.items():
        q = questions[native_id]
        good = grade_scicode(
            step_replies=[reply(c) for c in steps], payload=q.payload, secret=q.secret, h5_path=h5
        )
        assert good["correct"] is True, (native_id, good)
        broken = [reply(c) for c in steps]
        broken[-1] = reply(steps[-1].replace("return", "return 1.5 + ", 1))
        bad = grade_scicode(step_replies=broken, payload=q.payload, secret=q.secret, h5_path=h5)
        assert bad["correct"] is False, native_id
