"""A Compare link that names a parameter twice is refused, not half read (outside probe "ka",
2026-12-07). `/compare/?baseline=1&candidates=1&candidates=3&compare=1` — the deprecated
endpoint's repeated-`candidate` habit — compared run 3 alone: the form kept the last value, the
page said "Selected: 1" and run 1 was dropped without a word. The exports already refuse a
parameter given twice with a 400 that names it; the page now does the same."""

from __future__ import annotations

import pytest

from runs.models import Run
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(client):
    client.force_login(f.user_create())
    return client


def _runs():
    qs = b.questions({"mmlu-pro": 4})
    base = b.target("rp-base")
    router = b.target("rp-router", kind="mom")
    a = b.run(qs, {base: [True, False, True, False], router: [True, True, True, False]})
    c = b.run(qs, {router: [True, False, False, False]})
    return a, c


@pytest.mark.parametrize(
    "query",
    [
        "baseline={a}&candidates={a}&candidates={c}&compare=1",
        "baseline={c}&baseline={a}&candidates={a}&compare=1",
        "baseline={a}&candidates={a}&compare=1&compare=1",
        "baseline={a}&bt=rp-base&bt=x&candidates={a}&compare=1",
    ],
)
def test_a_parameter_given_twice_is_refused_by_name(member, query):
    a, c = _runs()
    query = query.format(a=a.pk, c=c.pk)
    repeated = next(
        name
        for name in ("baseline", "candidates", "compare", "bt")
        if query.count(f"{name}=") > 1 and name + "=" in query
    )
    response = member.get(f"/compare/?{query}")
    text = response.content.decode()
    assert response.status_code == 400, text[:400]
    assert "This link is damaged" in text
    assert f"<code>{repeated}</code>" in text and "more than once" in text
    # Nothing was compared from half of the link.
    assert 'class="result-card"' not in text
    assert Run.objects.filter(pk__in=[a.pk, c.pk]).count() == 2


def test_ticked_boxes_may_repeat(member):
    """`pick` is the one parameter a page sends many times (one per ticked box)."""
    a, c = _runs()
    response = member.get(
        f"/compare/?baseline={a.pk}&shown={a.pk},{c.pk}&pick={a.pk}&pick={c.pk}&op=apply"
    )
    assert response.status_code == 302
    assert f"candidates={a.pk}%2C{c.pk}" in response["Location"] or (
        f"candidates={a.pk}-{c.pk}" in response["Location"]
    )


def test_both_candidates_written_once_are_both_compared(member):
    a, c = _runs()
    response = member.get(f"/compare/?baseline={a.pk}&candidates={a.pk},{c.pk}&compare=1")
    assert response.status_code == 200
    text = response.content.decode()
    assert f'id="card-{a.pk}-rp-router"' in text and f'id="card-{c.pk}-rp-router"' in text
