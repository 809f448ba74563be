"""`benchmark lineage` prints every run below a run (R15.4, R13.1): the API pages a lineage's
children (25 a page by default, at most 100), and the verb printed the first page alone — 25
children of a run with more, with nothing saying the rest were not shown. It now follows the
pages (`next_children_after`) to the end, over HTTP and in-process alike; `--json` holds them
all too, with no cursor left."""

from __future__ import annotations

import json

import pytest

from tests import factories as f

pytestmark = pytest.mark.django_db(transaction=True)

# Past the API's largest page (100), so the verb must read more than one.
CHILDREN = 105


def test_lineage_prints_every_child_of_a_run_across_the_apis_pages(bench) -> None:
    owner = f.user_create()
    dataset = f.dataset_create()
    parent = f.run_create(name="the-parent", owner=owner, dataset=dataset)
    children = [
        f.run_create(name=f"child-{i}", parent=parent, owner=owner, dataset=dataset).pk
        for i in range(CHILDREN)
    ]

    result = bench("lineage", str(parent.pk))
    assert result.code == 0, result.err
    printed = [
        int(line.split()[2]) for line in result.out.splitlines() if line.startswith("child:")
    ]
    assert printed == children

    result = bench("lineage", str(parent.pk), "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert [c["id"] for c in doc["children"]] == children
    assert doc["next_children_after"] is None
    assert doc["run"]["id"] == parent.pk
