"""A benchmark none of whose cases has an outcome has no accuracy, and a target with such a
benchmark has no score (an outside probe in a browser: a target the run never called — it
failed closed on another target's first error — showed "Score 0.0000" and an mmlu-pro accuracy
of 0.0 with a Wilson interval [0, 0.215]; R1.2: unknown is null, never 0). A benchmark with
at least one outcome keeps the rule of the planned denominator: its unfinished cases count as
wrong, and the report says it is not complete."""

from __future__ import annotations

import pytest

from runs.reporting.report import run_report
from tests.compare import builders as b

pytestmark = pytest.mark.django_db


def test_a_target_never_called_has_no_accuracy_and_no_score():
    qs = b.questions({"mmlu-pro": 4, "gpqa": 2})
    called, never = b.target("called"), b.target("never")
    run = b.run(
        qs,
        {
            called: [True, False, "cancelled", "cancelled", True, None],
            never: ["cancelled"] * 6,
        },
        status="cancelled",
    )
    targets = {t["slug"]: t for t in run_report(run=run)["targets"]}

    unseen = targets["never"]
    for name in ("mmlu-pro", "gpqa"):
        row = unseen["benchmarks"][name]
        assert (row["accuracy"], row["wilson_95"]) == (None, None), row
        assert row["cancelled"] == row["planned"]
    assert unseen["score"]["value"] is None and unseen["score"]["kind"] == "none"

    # Measured in part: the planned denominator, the unfinished counted wrong (1 of 4, 1 of 2).
    seen = targets["called"]
    assert seen["benchmarks"]["mmlu-pro"]["accuracy"] == pytest.approx(1 / 4)
    assert seen["benchmarks"]["gpqa"]["accuracy"] == pytest.approx(1 / 2)
    assert seen["benchmarks"]["mmlu-pro"]["complete"] is False
    assert seen["score"]["value"] is not None
