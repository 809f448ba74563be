"""The comparison exports (GET /api/v1/compare/export.csv and .json) refuse a query parameter
they do not read, and a single one given twice (R11): a misspelt margin
(`non_inferiority_margn=0.02`) was dropped without a word, so the export's verdicts were those
of no margin while the user believed they had asked for one; `candidate=` beside `candidates=`
exported only the latter; a repeated baseline took the last."""

from __future__ import annotations

import pytest

from compare.api import EXPORT_PARAM_NAMES
from tests.compare.test_one_endpoint import api, setup  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("suffix", ["csv", "json"])
def test_an_export_refuses_what_it_does_not_read(api, setup, suffix):  # noqa: F811
    baseline, cands, _ = setup
    url = f"/api/v1/compare/export.{suffix}"
    base = f"baseline={baseline.pk}&candidates={cands[0].pk}"
    for extra, named in (
        ("non_inferiority_margn=0.02", "non_inferiority_margn"),
        (f"candidate={cands[1].pk}", "candidate"),
        (f"baseline={cands[1].pk}", "baseline"),
        (f"candidates={cands[1].pk}", "candidates"),
    ):
        response = api.get(f"{url}?{base}&{extra}")
        assert response.status_code == 400, (extra, response.content)
        # JSON names it in `detail`; CSV in its one-row error document.
        said = response.json()["detail"] if suffix == "json" else response.content.decode()
        assert named in said, (extra, said)
    # Everything it reads still answers (DRF's `format` too).
    ok = api.get(f"{url}?{base}&baseline_target=base")
    assert ok.status_code == 200, ok.content
    assert {"baseline", "candidates", "baseline_target", "format"} < EXPORT_PARAM_NAMES
