"""SciCode's test snippets split between the model's process and the judge (no target beside the
model's code), on the official test split and on the shapes its snippets take."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from runs.engine.scicode_split import UnsupportedTest, split_test


def names(source: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}


def official_test_cases() -> list[tuple[str, int, str]]:
    import scicode  # nvidia-scicode, installed with --no-deps (docs/decisions.md)

    path = Path(scicode.__file__).parent / "data" / "problems_all.jsonl"
    cases = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for step in row["sub_steps"]:
            for k, test in enumerate(step["test_cases"]):
                cases.append((step["step_number"], k, test))
    return cases


def test_every_official_test_snippet_splits_without_its_target_in_the_models_process():
    cases = official_test_cases()
    assert len(cases) == 915
    for number, k, test in cases:
        split = split_test(test, k)
        assert "target" not in names(split.model_source), (number, k)
        # Every assertion is the judge's, also the two that compare with None, not a target.
        top = ast.parse(split.model_source).body
        assert not any(isinstance(stmt, ast.Assert) for stmt in top), (number, k)
        assert any(j.source.startswith("assert ") for j in split.judge), (number, k)


def test_the_call_runs_in_the_models_process_and_the_comparison_in_the_judge():
    split = split_test("v0 = 10.0\nassert np.allclose(time_of_flight(v0, 0.5, 9.81), target)", 0)
    assert split.model_source == (
        "v0 = 10.0\n_srbench_record(0, 1, (lambda: time_of_flight(v0, 0.5, 9.81), ))"
    )
    assert [(j.source, j.values) for j in split.judge] == [
        ("v0 = 10.0", 0),
        ("assert np.allclose(_srbench_leaf[0], target)", 1),
    ]


def test_a_tests_own_reference_value_stays_with_the_judge():
    test = (
        "energy_ref = -4.729262873294083\n"
        "energy = calc_potential(top, bot)\n"
        "assert (np.abs(energy - energy_ref < 2)) == target"
    )
    split = split_test(test, 0)
    assert "energy_ref" not in names(split.model_source)
    assert "-4.729262873294083" not in split.model_source
    assert split.judge[-1].source == "assert np.abs(_srbench_leaf[0] - energy_ref < 2) == target"


def test_a_reference_the_models_process_needs_runs_in_both():
    split = split_test("N = 100\nx = f(N)\nassert np.allclose(x, target)", 0)
    assert "N = 100" in split.model_source
    assert split.judge[0].source == "N = 100"


def test_values_unpacked_from_the_target_are_compared_by_the_judge():
    test = (
        "time_step, prey, predator, event = gillespie_step(200, 200, 2.0, 0.01, 3.0)\n"
        "a, b, c, d = target\n"
        "assert np.allclose(time_step, a) and np.allclose(prey, b) and event == d"
    )
    split = split_test(test, 2)
    assert split.judge[0].source == "a, b, c, d = target"
    assert split.judge[1].values == 3
    assert "target" not in names(split.model_source)


def test_a_comparison_the_model_could_patch_runs_in_the_judge():
    split = split_test("assert (np.isclose(perform_diag(gl), perform_vqe(gl))) == target", 0)
    assert split.judge[0].source == (
        "assert np.isclose(_srbench_leaf[0], _srbench_leaf[1]) == target"
    )


def test_random_numbers_are_drawn_in_the_models_process_only():
    split = split_test("x = np.random.normal(0, 1, size=3)\nassert np.allclose(f(x), target)", 0)
    assert "np.random.normal" in split.model_source
    assert all("random" not in j.source for j in split.judge)


@pytest.mark.parametrize(
    "test",
    [
        "def g(x):\n    return f(x)\nassert g(target)",  # a test's function calling the model's
        "for t in target:\n    assert f(t)",
        "print(target)",
    ],
)
def test_a_target_the_judge_cannot_keep_is_unsupported(test: str):
    with pytest.raises(UnsupportedTest):
        split_test(test, 0)


def test_a_comparison_function_the_test_defines_runs_in_the_judge_with_the_target():
    test = (
        "def are_equivalent(a, b):\n"
        "    return a.shape == b.shape and all(np.allclose(x, y) for x, y in zip(a, b))\n"
        "assert are_equivalent(generate_gpoints(1), target)"
    )
    split = split_test(test, 0)
    assert split.judge[-1].source == "assert are_equivalent(_srbench_leaf[0], target)"
    assert "target" not in names(split.model_source)


def test_a_test_function_that_draws_random_numbers_stays_in_the_models_process():
    test = "def noisy(n):\n    return np.random.rand(n)\nassert np.allclose(f(noisy(3)), target)"
    split = split_test(test, 0)
    assert split.judge[-1].source == "assert np.allclose(_srbench_leaf[0], target)"
