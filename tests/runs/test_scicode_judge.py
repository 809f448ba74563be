"""The judge's half of a SciCode test, on carried values (no sandbox: the statements and the
values are plain data here)."""

from __future__ import annotations

import numpy as np
import pytest

from runs.engine.scicode_judge import allclose, judge_test
from runs.engine.scicode_values import Unserializable

ALLCLOSE = [{"source": "assert np.allclose(_srbench_leaf[0], target)", "values": 1}]


def outcome(value, target, statements=ALLCLOSE):
    return judge_test(0, statements, target, {(0, 0): [value]}, helpers={})


def test_a_value_close_to_its_target_passes_and_a_far_one_fails():
    assert outcome(np.float64(2.5 + 1e-12), 2.5) == "passed"
    assert outcome(3.0, 2.5) == "failed"


@pytest.mark.parametrize("empty", [np.array([]), [], np.zeros((0, 3))])
def test_an_empty_value_is_not_close_to_a_number(empty):
    """Upstream's np.allclose says it is: a reply returning an empty array passed every step
    whose target is a number."""
    assert np.allclose(np.asarray(empty), 2.5)  # the hole, in numpy itself
    assert outcome(empty, 2.5) == "failed"
    assert allclose(np.array([]), np.array([])) is True


def test_a_test_whose_values_never_came_is_missing():
    assert judge_test(0, ALLCLOSE, 2.5, {}, helpers={}) == "missing"


def test_a_value_the_format_does_not_carry_fails_the_test():
    assert outcome(Unserializable("mymodule.Anything"), 2.5) == "unserializable"


def test_a_comparison_that_raises_fails_the_test():
    statements = [{"source": "assert _srbench_leaf[0] == target", "values": 1}]
    assert outcome(np.zeros(3), 1.0, statements) == "error"  # an array's truth is ambiguous
