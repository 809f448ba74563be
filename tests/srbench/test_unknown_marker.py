"""One home for the unknown marker (issue 36 item 3): srbench/presenters.py builds
``<span class="unknown">…</span>``; templates write ``{{ value|unknown }}`` or ``{% unknown %}``
and Python code calls the presenters, so no template or module spells the marker itself."""

from __future__ import annotations

import re
from pathlib import Path

from django.template import Context, Template

ROOT = Path(__file__).resolve().parent.parent.parent
APPS = ("srbench", "datasets", "runs", "compare", "recipes")
HOME = ROOT / "srbench" / "presenters.py"

# An element whose class attribute is exactly "unknown" or starts with that class, quoted either
# way (a template's attribute, or a string literal in Python that builds one).
INLINE_MARKER = re.compile(r"""class\s*=\s*\\?["']unknown[\s"'\\]""")


def inline_markers(text: str, name: str) -> list[str]:
    return [f"{name}:{text.count(chr(10), 0, m.start()) + 1}" for m in INLINE_MARKER.finditer(text)]


def render(text: str, **context: object) -> str:
    return Template("{% load display %}" + text).render(Context(context))


def test_the_check_sees_an_inline_marker() -> None:
    sample = (
        '<td>{% if v is None %}<span class="unknown">unknown</span>{% endif %}</td>\n'
        "<td><span class='unknown' title=\"why\">none</span></td>\n"
        '<td><span class="unknown-lane"></span>{% unknown %}{{ v|unknown }}</td>\n'
        "UNKNOWN = mark_safe('<span class=\"unknown\">unknown</span>')\n"
    )
    assert inline_markers(sample, "t.html") == ["t.html:1", "t.html:2", "t.html:4"]


def test_no_template_spells_the_unknown_marker() -> None:
    found = []
    for path in sorted((ROOT / "templates").rglob("*.html")):
        found += inline_markers(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []


def test_no_module_but_the_presenters_builds_the_marker() -> None:
    found = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if path != HOME and "templatetags" not in path.parts:
                found += inline_markers(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []


def test_the_tag_renders_the_one_marker() -> None:
    assert render("{% unknown %}") == '<span class="unknown">unknown</span>'
    assert render('{% unknown "not scored" %}') == '<span class="unknown">not scored</span>'
    assert render('{% unknown "none" title="no score" %}') == (
        '<span class="unknown" title="no score">none</span>'
    )
    assert render("{% unknown reason=why %}", why="<no price>") == (
        '<span class="unknown">unknown</span> <span class="meta">&lt;no price&gt;</span>'
    )


def test_the_filter_gives_the_reason_beside_the_marker() -> None:
    assert render("{{ v|unknown:why }}", v=None, why="no usage") == (
        '<span class="unknown">unknown</span> <span class="meta">no usage</span>'
    )
    assert render("{{ v|unknown:why }}", v=0, why="no usage") == "0"


def test_interval_filter() -> None:
    assert render("{{ b|interval }}", b=[0.12345, 0.5]) == "[0.123, 0.500]"
    assert render("{{ b|interval:4 }}", b=(0.1, 0.25)) == "[0.1000, 0.2500]"
    assert render("{{ b|interval }}", b=None) == '<span class="unknown">unknown</span>'
    # rounded as floatformat rounds, so the pages' figures did not move
    assert render("{{ b|interval }}", b=[0.0005, 0.1235]) == render(
        "[{{ b.0|floatformat:3 }}, {{ b.1|floatformat:3 }}]", b=[0.0005, 0.1235]
    )


def test_verdict_class() -> None:
    assert render("{{ v|verdict_class }}", v="non_inferior") == "ok"
    assert render("{{ v|verdict_class }}", v="worse") == "bad"
