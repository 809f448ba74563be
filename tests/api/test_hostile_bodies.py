"""Hostile request bodies (issue 19): deep nesting, huge strings, invalid Unicode, wrong types,
unknown fields, non-object tops, empty bodies and wrong content types, sent to every write
endpoint the OpenAPI schema documents (tests/api/test_schema.py keeps the schema equal to the
URL conf, so a new endpoint is fuzzed without touching this file). None may answer 5xx; every
refusal is the JSON error document {error, code, detail}.

Seeded and in-process (Django's test client); the route preview goes to a running simulator.
"""

from __future__ import annotations

import json
import logging
import random
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.signals import got_request_exception
from django.test import Client, RequestFactory
from django.urls import get_resolver
from rest_framework.authtoken.models import Token

from datasets.services import source_prepare_receipt
from srbench.api import error_404, error_500
from srbench.json_values import MAX_JSON_BODY_BYTES, MAX_JSON_DEPTH
from srbench.simulator.testing import running_simulator
from tests import factories as f
from tests.api.conftest import Seeded, seed
from tests.conftest import purge_broker
from tests.recipes.support import mom_target

pytestmark = pytest.mark.django_db(transaction=True)

SEED = 19
WRITE_METHODS = ("post", "put", "patch", "delete")
# Issue 19 found 500s on these; the enumeration must find them (and whatever came since).
NAMED = {
    ("post", "/api/v1/runs/"),
    ("post", "/api/v1/plans/review/"),
    ("post", "/api/v1/runs/{id}/recover/"),
    ("post", "/api/v1/datasets/compose/"),
    ("post", "/api/v1/compare/"),
    ("post", "/api/v1/sources/prepare/"),
    ("post", "/api/v1/targets/{slug}/route-preview/"),
}
JSON = "application/json"
# A refusal the parser or the field check must give whatever the endpoint (categories below).
ALWAYS_REFUSED = {"deep", "invalid unicode", "unknown field", "non-object", "content type", "size"}


@dataclass(frozen=True)
class Endpoint:
    method: str
    template: str
    path: str
    fields: tuple[str, ...]  # the documented body fields (none: the action takes no body)
    base: dict[str, Any]  # a plausible body the mutations start from


@dataclass(frozen=True)
class Hostile:
    category: str
    label: str
    body: bytes
    content_type: str = JSON
    idempotency_key: str | None = None  # a header the body parser never sees


# --- the endpoints ------------------------------------------------------------------------


@dataclass
class World:
    seeded: Seeded
    headers: dict[str, str]
    source_id: int
    preview_slug: str


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _path_for(template: str, world: World) -> str:
    values = {
        "id": world.seeded.run.pk,
        "run_id": world.seeded.run.pk,
        "pk": world.seeded.run.pk,
        "slug": world.preview_slug,
    }
    if template.startswith("/api/v1/datasets/{id}"):
        values["id"] = world.seeded.dataset_id
    path = template
    for name, value in values.items():
        path = path.replace("{" + name + "}", str(value))
    assert "{" not in path, f"no value for a path parameter of {template}"
    return path


def _placeholder(prop: dict[str, Any]) -> Any:
    kind = prop.get("type")
    return {"integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}.get(kind, "x")


def _base_bodies(world: World) -> dict[str, dict[str, Any]]:
    """Bodies that pass validation (or nearly), so mutations reach the deeper code."""
    s = world.seeded
    return {
        "/api/v1/runs/": {"name": "fuzz", "dataset": s.dataset_id, "targets": [s.target_slug]},
        "/api/v1/plans/review/": {
            "name": "fuzz",
            "dataset": s.dataset_id,
            "targets": [s.target_slug],
        },
        "/api/v1/runs/{id}/recover/": {
            "mode": "undispatched",
            "plan_sha256": "0" * 64,
            "selected_cells": [1],
        },
        "/api/v1/datasets/compose/": {"sources": [world.source_id], "name": "fuzz"},
        "/api/v1/compare/": {"baseline": s.run.pk, "candidates": [s.run.pk]},
        "/api/v1/sources/prepare/": {"benchmark": "mmlu-pro", "profile": "smoke"},
        "/api/v1/targets/{slug}/route-preview/": {"prompt": "Which model?"},
    }


def write_endpoints(client: Client, world: World) -> list[Endpoint]:
    schema = client.get("/api/schema/", {"format": "json"}, headers=world.headers).json()
    bases = _base_bodies(world)
    found = []
    for template, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method not in WRITE_METHODS:
                continue
            content = operation.get("requestBody", {}).get("content", {})
            body_schema = _resolve(schema, content.get(JSON, {}).get("schema", {}))
            props = body_schema.get("properties", {})
            base = bases.get(template) or {
                name: _placeholder(_resolve(schema, prop)) for name, prop in props.items()
            }
            found.append(Endpoint(method, template, _path_for(template, world), tuple(props), base))
    return found


# --- the bodies ---------------------------------------------------------------------------


def _nest(depth: int, rng: random.Random) -> str:
    """`depth` levels of arrays and objects around a number, as JSON text."""
    opens, closes = [], []
    for _ in range(depth):
        if rng.random() < 0.5:
            opens.append("[")
            closes.append("]")
        else:
            opens.append('{"a":')
            closes.append("}")
    return "".join(opens) + "1" + "".join(reversed(closes))


def _with(base: dict[str, Any], key: str, raw_value: str) -> bytes:
    """The base body with `key` set to a JSON text (which json.dumps could not produce)."""
    rest = {k: v for k, v in base.items() if k != key}
    inner = json.dumps(rest)[1:-1]
    return (
        "{" + (inner + ", " if inner else "") + json.dumps(key) + ": " + raw_value + "}"
    ).encode()


WRONG_VALUES = [
    "null",
    "true",
    "false",
    "0",
    "-1",
    "1.5",
    "-0.0",
    "1e308",
    "1e999",
    "-1e999",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551616",
    "1" * 4000,
    '""',
    '" "',
    '"x"',
    '"1"',
    '"true"',
    "[]",
    "[null]",
    "[[]]",
    '["x", 1, null]',
    "[" + ",".join(["1"] * 5000) + "]",
    "{}",
    '{"a": null}',
    '{"": ""}',
    '"\\u202e\\u200b"',
    '"\\ud83d\\ude00"',  # a valid pair: an emoji, not an error
    '"' + "é" * 1000 + '"',
]
UNKNOWN_FIELDS = ["url", "id", "owner", "__proto__", "", " ", "name ", "Name", "x" * 300, "ü"]
INVALID_UNICODE_VALUES = [
    '"\\ud800"',
    '"\\udfff"',
    '"a\\udc00b"',
    '"\\udc00\\ud800"',  # a pair in the wrong order
    '"\\ud800\\u0041"',
    '["ok", "\\ud800"]',
    '{"k": "\\udbff"}',
    '{"\\ud800": 1}',
    '"\\u0000"',
    '"a\\u0000b"',
    '{"\\u0000": 1}',
]
RAW_INVALID_UTF8 = [
    b"\xff\xfe",
    b"\xc3\x28",
    b"\xc0\xaf",  # overlong "/"
    b"\xed\xa0\x80",  # a surrogate encoded as if it were a character (CESU-8)
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\x80",
    b"\xe2\x82",  # truncated sequence
]
CONTENT_TYPES = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=BoUnDaRy",
    "application/xml",
    "application/json-patch+json",
    "application/octet-stream",
    "",
]


def hostile_bodies(endpoint: Endpoint, rng: random.Random) -> Iterator[Hostile]:
    base = endpoint.base
    fields = list(endpoint.fields) or ["x"]
    good = json.dumps(base).encode()

    # Deep nesting: as the whole body, and under a real field; past the limit and far past it.
    for depth in (MAX_JSON_DEPTH + 1, 100, 1000, 5000, 100_000):
        yield Hostile("deep", f"body {depth}", _nest(depth, rng).encode())
        yield Hostile("deep", f"field {depth}", _with(base, rng.choice(fields), _nest(depth, rng)))
    yield Hostile("deep", "unclosed", b"[" * 50_000)
    yield Hostile("deep", "unclosed objects", b'{"a":' * 50_000)

    # Huge strings: a long value in each field, a long key, and a body past the size limit.
    for field in fields:
        for size in (10_000, 1_000_000):
            yield Hostile("huge", f"{field} {size}", _with(base, field, json.dumps("x" * size)))
    yield Hostile("huge", "long key", _with(base, "k" * 100_000, "1"))
    yield Hostile(
        "size", "past the limit", _with(base, fields[0], json.dumps("y" * MAX_JSON_BODY_BYTES))
    )

    # Invalid Unicode: escaped lone surrogates and NUL in values and keys; raw invalid UTF-8.
    for value in INVALID_UNICODE_VALUES:
        yield Hostile("invalid unicode", value, _with(base, rng.choice(fields), value))
    for raw in RAW_INVALID_UTF8:
        inner = good[:-1] + b', "' + fields[0].encode() + b'": "' + raw + b'"}'
        if not base:
            inner = b'{"' + fields[0].encode() + b'": "' + raw + b'"}'
        yield Hostile("invalid unicode", f"raw {raw!r}", inner)
    yield Hostile("invalid unicode", "utf-16 body", json.dumps(base).encode("utf-16"))

    # Wrong types: every field, a sample of the wrong values each (all of them for the first).
    for i, field in enumerate(fields):
        values = WRONG_VALUES if i == 0 else rng.sample(WRONG_VALUES, 8)
        for value in values:
            yield Hostile("wrong type", f"{field}={value[:20]}", _with(base, field, value))
    for constant in ("NaN", "Infinity", "-Infinity"):
        yield Hostile("wrong type", constant, _with(base, fields[0], constant))

    # Unknown fields beside a plausible body.
    for name in UNKNOWN_FIELDS:
        yield Hostile("unknown field", name[:20], json.dumps({**base, name: "x"}).encode())

    # Not an object at the top.
    for top in ("[]", json.dumps([base]), '"plan"', "1", "null", "true", "1.5", "[[[]]]"):
        yield Hostile("non-object", top[:20], top.encode())

    # Malformed JSON.
    for raw in (
        good[: len(good) // 2],
        good + b"garbage",
        good + good,
        b"{'name': 'x'}",
        b'{"a": 1,}',
        b"{/* c */}",
        b'{"a" 1}',
        b"\xef\xbb\xbf" + good,  # a byte-order mark
        b"\x00" * 16,
        b'{"a": "\x01\n"}',  # raw control characters inside a string
        b'{"a": 01}',
        b'{"a": .5}',
        b'{"a": 1e}',
        bytes(rng.randrange(256) for _ in range(512)),
    ):
        yield Hostile("malformed", repr(raw[:20]), raw)

    # A plausible body under a hostile Idempotency-Key header.
    for key in ("a\x00b", "\udcff", "k" * 1000, "", " ", "\u202e"):
        yield Hostile("header", repr(key[:8]), good, idempotency_key=key)

    # Empty bodies.
    for raw in (b"", b" ", b"\n\t", b"{}"):
        yield Hostile("empty", repr(raw), raw)

    # Wrong content types, with a body that would be fine as JSON.
    for content_type in CONTENT_TYPES:
        yield Hostile("content type", content_type or "(none)", good, content_type)
    yield Hostile("content type", "form", b"name=x&dataset=1", "application/x-www-form-urlencoded")
    yield Hostile(
        "content type",
        "multipart",
        b'--BoUnDaRy\r\nContent-Disposition: form-data; name="name"\r\n\r\nx\r\n--BoUnDaRy--\r\n',
        "multipart/form-data; boundary=BoUnDaRy",
    )


# --- the test ---------------------------------------------------------------------------


@pytest.fixture
def world(transactional_db: None) -> Iterator[World]:
    seeded = seed()
    operator = f.user_create(username="fuzz-operator", staff=True)
    token, _ = Token.objects.get_or_create(user=operator)
    source = source_prepare_receipt(benchmark="mmlu-pro", profile="smoke").source
    with running_simulator() as url:
        target = mom_target(url, capture=False)
        yield World(
            seeded=seeded,
            # An operator passes every permission check, so each body reaches the parser.
            headers={"Authorization": f"Token {token.key}"},
            source_id=source.pk,
            preview_slug=target.slug,
        )
    purge_broker()  # runs a valid body created were announced to nobody


def _error_document(response: Any) -> str | None:
    """Why the answer is not the house error document, or None when it is."""
    if not response.get("Content-Type", "").startswith(JSON):
        return f"not JSON but {response.get('Content-Type')!r}"
    try:
        doc = json.loads(response.content)
    except ValueError:
        return "unparseable JSON"
    if not isinstance(doc, dict) or not {"error", "code", "detail"} <= set(doc):
        return f"not the error document: {str(doc)[:200]}"
    return None


def test_no_hostile_body_gets_a_server_error_from_any_write_endpoint(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL, logger="django.request")  # thousands of 4xx
    client = Client(raise_request_exception=False)
    endpoints = write_endpoints(client, world)
    assert {(e.method, e.template) for e in endpoints} >= NAMED

    crashes: list[str] = []

    def record(sender: Any, request: Any = None, **kwargs: Any) -> None:
        crashes.append(repr(sys.exc_info()[1])[:300])

    got_request_exception.connect(record)
    rng = random.Random(SEED)
    failures: list[str] = []
    sent = 0
    statuses: Counter[tuple[str, int]] = Counter()
    try:
        for endpoint in endpoints:
            for hostile in hostile_bodies(endpoint, rng):
                headers = dict(world.headers)
                if hostile.idempotency_key is not None:
                    headers["Idempotency-Key"] = hostile.idempotency_key
                response = client.generic(
                    endpoint.method.upper(),
                    endpoint.path,
                    hostile.body,
                    content_type=hostile.content_type,
                    headers=headers,
                )
                sent += 1
                statuses[(hostile.category, response.status_code)] += 1
                where = f"{endpoint.method.upper()} {endpoint.template} "
                where += f"[{hostile.category}: {hostile.label}]"
                if response.status_code >= 500:
                    failures.append(f"{where}: {response.status_code} {crashes[-1:]}")
                elif response.status_code >= 400 and (problem := _error_document(response)):
                    failures.append(f"{where}: {response.status_code} {problem}")
                elif not response.get("Content-Type", "").startswith(JSON):
                    failures.append(f"{where}: {response.status_code} not JSON")
                elif hostile.category in ALWAYS_REFUSED and response.status_code < 400:
                    failures.append(f"{where}: accepted with {response.status_code}")
    finally:
        got_request_exception.disconnect(record)
    print(
        f"\n{sent} hostile bodies to {len(endpoints)} write endpoints: {sorted(statuses.items())}"
    )
    assert sent >= 1000
    assert not failures, f"{len(failures)} of {sent}:\n" + "\n".join(failures[:60])


def test_deep_nesting_and_lone_surrogates_are_named_in_the_refusal(world: World) -> None:
    client = Client()
    cases = [
        ("[" * 100 + "]" * 100, "too_deep"),
        ("[" * 100_000 + "]" * 100_000, "too_deep"),
        ('{"name": "\\ud800"}', "invalid_unicode"),
        ('{"name": "a\\u0000b"}', "nul_character"),
        ('{"name": 1e999}', "invalid_number"),
    ]
    for body, code in cases:
        response = client.post(
            "/api/v1/plans/review/", body, content_type=JSON, headers=world.headers
        )
        assert response.status_code == 400, (body[:20], response.content[:200])
        assert response.json()["code"] == code, response.json()
    raw = client.post(
        "/api/v1/plans/review/", b'{"name": "\xff"}', content_type=JSON, headers=world.headers
    )
    assert (raw.status_code, raw.json()["code"]) == (400, "invalid_unicode")
    big = client.post(
        "/api/v1/plans/review/",
        b'"' + b"x" * MAX_JSON_BODY_BYTES + b'"',
        content_type=JSON,
        headers=world.headers,
    )
    assert (big.status_code, big.json()["code"]) == (400, "too_large")


def test_prepare_refuses_an_unknown_field_and_writes_nothing(world: World) -> None:
    from datasets.models import Source

    before = Source.objects.count()
    response = Client().post(
        "/api/v1/sources/prepare/",
        {"benchmark": "gpqa", "profile": "smoke", "url": "https://example.com/gpqa.csv"},
        content_type=JSON,
        headers=world.headers,
    )
    assert response.status_code == 400
    assert response.json()["detail"] == {"url": ["Unknown field."]}
    assert Source.objects.count() == before


def test_a_form_body_is_refused_as_an_unsupported_media_type(world: World) -> None:
    response = Client().post(
        "/api/v1/plans/review/", {"name": "x"}, headers=world.headers
    )  # Django's test client sends multipart by default
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


def test_django_error_pages_under_api_are_json_and_elsewhere_html() -> None:
    resolver = get_resolver()
    assert resolver.resolve_error_handler(500) is error_500
    assert resolver.resolve_error_handler(404) is error_404
    api = RequestFactory().get("/api/v1/anything/")
    page = RequestFactory().get("/runs/")
    crashed = error_500(api)
    assert crashed.status_code == 500 and crashed["Content-Type"] == JSON
    assert json.loads(crashed.content)["code"] == "server_error"
    missing = error_404(api, Exception("no"))
    assert missing.status_code == 404 and json.loads(missing.content)["code"] == "not_found"
    assert error_500(page)["Content-Type"].startswith("text/html")


def test_a_body_of_many_unknown_fields_is_refused_naming_a_few_and_counting_the_rest(
    world: World,
) -> None:
    """A 400 names at most ECHO_MAX_ITEMS unknown fields, each cut, and counts the others: a
    body of 50,000 unknown fields (one of 20,000 characters) answered every name."""
    from datasets.models import Source
    from srbench.refusals import ECHO_MAX_CHARS, ECHO_MAX_ITEMS

    before = Source.objects.count()
    body: dict[str, Any] = {"benchmark": "gpqa", "profile": "smoke", "a" * 20_000: 1}
    body |= {f"x{i:05d}": 1 for i in range(50_000)}
    response = Client().post(
        "/api/v1/sources/prepare/", body, content_type=JSON, headers=world.headers
    )
    assert response.status_code == 400
    assert len(response.content) < 4_000, len(response.content)
    detail = response.json()["detail"]
    names = sorted(body.keys() - {"benchmark", "profile"})
    named = [k for k in detail if k != "…"]
    assert len(named) == ECHO_MAX_ITEMS
    assert named[0].startswith("a" * ECHO_MAX_CHARS) and "(20000 characters)" in named[0]
    assert named[1:] == names[1:ECHO_MAX_ITEMS]
    assert detail["…"] == [f"and {len(names) - ECHO_MAX_ITEMS:,} more unknown fields"]
    assert Source.objects.count() == before
