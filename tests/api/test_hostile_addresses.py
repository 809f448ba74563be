"""NUL in an address (an outside probe, 2026-12-06): a path or query string holding U+0000
(`%00`) reached filters and lookups on PostgreSQL text, which cannot hold it, and the API
answered 500. Every GET operation the OpenAPI schema documents, with NUL in each documented
query parameter and in each path parameter, and the addresses the probe named, must be
refused 400 with the refusal document {error, code, detail}; a page answers Django's 400.

The same probe, later: `/api/v1/runs/1%0A/` (a path segment ending in a newline) answered run 1
(DRF's lookup pattern took "1\n" and int("1\n") == 1). Every control character (C0, DEL) in a
path is refused the same way, code `control_character`."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests import factories as f
from tests.api.conftest import Seeded

pytestmark = pytest.mark.django_db(transaction=True)

NUL = "\x00"
# The probe's 500s: query parameters the schema does not list, and slugs in paths.
NAMED = [
    "/api/v1/runs/?name=%00",
    "/api/v1/runs/?model=%00",
    "/api/v1/runs/?status=%00",
    "/api/v1/runs/{run}/events/?type=%00",
    "/api/v1/datasets/?q=%00",
    "/api/v1/datasets/{dataset}/questions/?q=%00",
    "/api/v1/datasets/{dataset}/questions/?subject=%00",
    "/api/v1/targets/%00/",
    "/api/v1/targets/a%00b/",
    "/api/v1/targets/%00/preflight/",
    "/api/v1/audit/?actor=%00",
]


def addresses(client: Client, seeded: Seeded) -> list[str]:
    schema = client.get("/api/schema/", {"format": "json"}).json()
    found = []
    for template, operations in schema["paths"].items():
        get = operations.get("get")
        if get is None:
            continue
        params = get.get("parameters", []) + operations.get("parameters", [])
        path = template
        for p in params:
            if p["in"] == "path":
                path = path.replace("{" + p["name"] + "}", _known(p["name"], seeded))
        found.extend(f"{path}?{p['name']}=%00" for p in params if p["in"] == "query")
        for p in params:
            if p["in"] == "path":
                found.append(
                    template.replace("{" + p["name"] + "}", "a%00b")
                    .replace("{", "")
                    .replace("}", "")
                )
    return found


def _known(name: str, seeded: Seeded) -> str:
    return {"slug": seeded.target_slug, "id": str(seeded.run.pk)}.get(name, "1")


def _refused(response: Any, address: str, code: str = "nul_character") -> None:
    assert response.status_code == 400, (address, response.status_code)
    body = response.json()
    assert body["code"] == code and set(body) == {"error", "code", "detail"}, body


# Tab, line feed, carriage return, the other C0 controls' ends, escape and DEL.
CONTROLS = ["%09", "%0A", "%0D", "%01", "%1B", "%1F", "%7F"]


def control_addresses(client: Client, seeded: Seeded, control: str) -> list[str]:
    """Each GET path the schema documents with `control` after each path parameter's known value
    (the probe's `1%0A`) and inside a made-up one; a path without parameters with it as a last
    segment."""
    schema = client.get("/api/schema/", {"format": "json"}).json()
    found = []
    for template, operations in schema["paths"].items():
        get = operations.get("get")
        if get is None:
            continue
        names = [
            p["name"]
            for p in get.get("parameters", []) + operations.get("parameters", [])
            if p["in"] == "path"
        ]
        if not names:
            found.append(f"{template}{control}")
        for name in names:
            known = {n: _known(n, seeded) for n in names}
            for value in (known[name] + control, f"a{control}b"):
                found.append(template.format(**{**known, name: value}))
    return found


def test_nul_in_any_api_address_is_a_400_refusal(seeded: Seeded) -> None:
    staff = f.user_create(username="ops", staff=True)
    client = Client()
    client.force_login(staff)
    listed = addresses(client, seeded)
    assert len(listed) >= 20, listed  # the schema was read
    named = [a.format(run=seeded.run.pk, dataset=seeded.dataset_id) for a in NAMED]
    for address in listed + named:
        _refused(client.get(address), address)
    # A write's address too (the route preview by a slug holding NUL).
    _refused(
        client.post("/api/v1/targets/%00/route-preview/", {}, content_type="application/json"),
        "route-preview",
    )


def test_a_control_character_in_any_api_path_is_a_400_refusal(seeded: Seeded) -> None:
    staff = f.user_create(username="ops", staff=True)
    client = Client()
    client.force_login(staff)
    run = seeded.run.pk
    assert client.get(f"/api/v1/runs/{run}/").status_code == 200  # the same run, no control
    for control in CONTROLS:
        listed = control_addresses(client, seeded, control)
        assert len(listed) >= 20, listed  # the schema was read
        assert f"/api/v1/runs/{run}{control}/" in listed
        for address in listed:
            _refused(client.get(address), address, "control_character")
        _refused(
            client.post(f"/api/v1/runs/{run}{control}/cancel/", content_type="application/json"),
            "cancel",
            "control_character",
        )
    # NUL keeps its own code; a control character in a query value is data (a search for it).
    _refused(client.get(f"/api/v1/runs/{run}%00/"), "NUL")
    assert client.get("/api/v1/runs/", {"name": "a\tb\nc"}).status_code == 200


def test_nul_in_a_page_address_is_a_400() -> None:
    client = Client()
    client.force_login(f.user_create())
    for address in (
        "/?q=%00",
        "/runs/%00/",
        "/targets/?q=%00",
        "/compare/?baseline=%00",
        "/runs/1%0A/",
        "/targets/%09/",
        "/%7F",
    ):
        assert client.get(address).status_code == 400, address
    assert client.get("/?q=a").status_code == 200  # the same page without NUL
