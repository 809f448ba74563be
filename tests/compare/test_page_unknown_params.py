"""The Compare page refuses a query parameter it does not read, as the API does (R11.3: the
selection lives in the URL, so a link is the request). `/compare/?baseline=1&candidates=1&
compare=1&baseline_target=rp-base` — the exports' name for the page's `bt` — compared against
the default strongest model and said nothing: the choice was dropped. Now a 400 naming it and
what the page reads (srbench.query_params, the API's rule). Every link and form the app itself
builds to the page still answers."""

from __future__ import annotations

import re
from html import unescape

import pytest

from compare.forms import CompareForm
from tests.compare.test_page_repeated_params import _runs, member  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("baseline={a}&candidates={a}&compare=1&baseline_target=rp-base", "baseline_target"),
        ("baseline={a}&candidate={c}&compare=1", "candidate"),
        ("bpage=1&serach=x", "serach"),
    ],
)
def test_a_parameter_the_page_does_not_read_is_refused_by_name(member, query, named):  # noqa: F811
    a, c = _runs()
    response = member.get(f"/compare/?{query.format(a=a.pk, c=c.pk)}")
    text = response.content.decode()
    assert response.status_code == 400, text[:400]
    assert "This link is damaged" in text and f"<code>{named}</code>" in text
    assert "it reads baseline, bpage, bq, bt, candidates" in text
    assert 'class="result-card"' not in text


def _links_and_forms(html: str) -> tuple[list[str], list[set[str]]]:
    links = [unescape(h) for h in re.findall(r'href="(/compare/\?[^"#]*)', html)]
    forms = [
        set(re.findall(r'name="([^"]+)"', body))
        for body in re.findall(
            r'<form method="get" action="/compare/"[^>]*>(.*?)</form>', html, re.S
        )
    ]
    return links, forms


def test_every_link_and_form_the_app_builds_to_the_page_is_read(member):  # noqa: F811
    a, c = _runs()
    starts = [
        "/compare/",
        "/compare/?bq=run",
        f"/compare/?baseline={a.pk}",
        f"/compare/?baseline={a.pk}&candidates={a.pk},{c.pk}&compare=1",
    ]
    # The run page's own "Compare" action.
    run_page = member.get(f"/runs/{a.pk}/").content.decode()
    starts += [unescape(h) for h in re.findall(r'href="(/compare/\?[^"#]*)', run_page)]
    assert len(starts) > 4, "the run page links to the Compare page"
    seen_links = 0
    for start in starts:
        response = member.get(start)
        assert response.status_code == 200, (start, response.content[:400])
        links, forms = _links_and_forms(response.content.decode())
        for link in links:
            followed = member.get(link)
            assert followed.status_code in (200, 302), (link, followed.content[:400])
            seen_links += 1
        for names in forms:
            assert names and names <= set(CompareForm.base_fields), names
    assert seen_links, "the pages link to themselves"
