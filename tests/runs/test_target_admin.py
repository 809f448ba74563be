"""Operators register targets in the admin; the API key is write-only (issue 2)."""

import io
import json

import pytest
from django.core.management import call_command

from runs.ledger.selectors import target_api_key
from runs.models import Target, TargetSecret
from tests import factories as f

pytestmark = pytest.mark.django_db

KEY = "sk-live-THIS-MUST-NEVER-LEAK-8c1f"
HASH = "e" * 64


def price_rows(table, *, blank_rows=1):
    """The price form's fields for a table {model: {bucket: text}} (issue 23: a form, not JSON)."""
    rows = [{"model": m, **r} for m, r in table.items()] + [{}] * blank_rows
    data = {"prices-rows": str(len(rows))}
    for i, row in enumerate(rows):
        data[f"prices-{i}-model"] = row.get("model", "")
        for bucket in ("input", "cached_input", "cache_write", "output"):
            data[f"prices-{i}-{bucket}"] = row.get(bucket, "")
    return data


def target_form(**over):
    prices = over.pop(
        "prices", {"sim-strong": {"input": "3", "cached_input": "0.3", "output": "15"}}
    )
    data = {
        "slug": "gpt-x",
        "name": "GPT X",
        "kind": "single",
        "active": "on",
        "base_url": "http://127.0.0.1:8100/v1",
        "api": "openai",  # the Endpoint's wire (issue 37 item 4): the admin's select always posts one
        "model": "sim-strong",
        "api_key": KEY,
        "api_key_env": "",
        "fixed_params": json.dumps({"temperature": 0}),
        "config_hash": "",
        "preview_url": "",
        "max_inference_calls": "",
    }
    data.update(price_rows(prices) if isinstance(prices, dict) else prices)
    data.update(over)
    return data


@pytest.fixture
def operator_client(client):
    client.force_login(f.user_create(staff=True))
    return client


def test_operator_registers_a_target_and_its_key_is_stored_encrypted(operator_client):
    response = operator_client.post("/admin/runs/target/add/", target_form())
    assert response.status_code == 302, response.content.decode()[:2000]
    target = Target.objects.get(slug="gpt-x")
    secret = TargetSecret.objects.get(target=target)
    assert KEY.encode() not in bytes(secret.api_key_encrypted)
    assert target_api_key(target=target) == KEY


def test_api_key_appears_in_no_admin_page_api_response_or_export(operator_client):
    operator_client.post("/admin/runs/target/add/", target_form())
    target = Target.objects.get(slug="gpt-x")
    pages = [
        operator_client.get(f"/admin/runs/target/{target.pk}/change/"),
        operator_client.get("/admin/runs/target/"),
        operator_client.get("/api/v1/targets/"),
        operator_client.get("/api/v1/targets/gpt-x/"),
        operator_client.get("/targets/"),
        operator_client.get("/api/schema/"),
    ]
    for page in pages:
        assert page.status_code == 200
        assert KEY not in page.content.decode()
    export = io.StringIO()
    call_command("dumpdata", "runs", stdout=export)
    assert KEY not in export.getvalue()
    assert "gpt-x" in export.getvalue()  # the export did include the target


def test_saving_without_a_new_key_keeps_the_stored_one(operator_client):
    operator_client.post("/admin/runs/target/add/", target_form())
    target = Target.objects.get(slug="gpt-x")
    response = operator_client.post(
        f"/admin/runs/target/{target.pk}/change/", target_form(api_key="", name="Renamed")
    )
    assert response.status_code == 302
    assert target_api_key(target=target) == KEY


def test_clear_api_key_removes_it(operator_client):
    operator_client.post("/admin/runs/target/add/", target_form())
    target = Target.objects.get(slug="gpt-x")
    operator_client.post(
        f"/admin/runs/target/{target.pk}/change/", target_form(api_key="", clear_api_key="on")
    )
    assert target_api_key(target=target) is None


@pytest.mark.parametrize(
    ("over", "field", "message"),
    [
        ({"kind": "mom", "model": "auto"}, "config_hash", "needs a pinned config_hash"),
        ({"kind": "mom", "config_hash": "XYZ"}, "config_hash", "64 lowercase hexadecimal"),
        (
            {"kind": "mom", "config_hash": HASH, "capture_recipe": "on"},
            "preview_url",
            "capture_recipe needs the canonical preview_url",
        ),
        (
            {"kind": "mom", "config_hash": HASH, "preview_url": "http://127.0.0.1:8100/other"},
            "preview_url",
            "routing/preview",
        ),
        ({"capture_recipe": "on"}, "capture_recipe", "only to MoM targets"),
        ({"kind": "mom", "config_hash": HASH, "api": "anthropic"}, "api", "OpenAI chat route"),
        ({"prices": {"m": {"input": "x", "output": "1"}}}, "prices", "not a decimal"),
        ({"prices": {"m": {"input": "1"}}}, "prices", "'output' price is required"),
        ({"prices": {"m": {"input": "-1", "output": "1"}}}, "prices", "≥ 0"),
        ({"prices": {"m": {"input": "NaN", "output": "1"}}}, "prices", "finite"),
        ({"prices": {"m": {"input": "1", "output": "Infinity"}}}, "prices", "finite"),
        ({"prices": {"": {"input": "1", "output": "2"}}}, "prices", "name the served model"),
    ],
)
def test_admin_rejects_an_invalid_target_with_a_clear_message(
    operator_client, over, field, message
):
    response = operator_client.post("/admin/runs/target/add/", target_form(**over))
    assert response.status_code == 200  # the form again, with errors
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    assert any(message in e for e in errors[field]), errors[field]
    assert not Target.objects.filter(slug="gpt-x").exists()


def test_the_database_refuses_a_mom_router_on_the_messages_api_from_any_writer():
    """The admin's message above is for people; the constraint holds for every other writer."""
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError, match="target_mom_speaks_openai"), transaction.atomic():
        Target.objects.create(
            slug="router", kind="mom", config_hash=HASH, api="anthropic", base_url="http://x/v1"
        )
    Target.objects.create(slug="claude", api="anthropic", base_url="http://x/v1")


def test_mom_target_with_recipe_capture_is_accepted(operator_client):
    response = operator_client.post(
        "/admin/runs/target/add/",
        target_form(
            kind="mom",
            model="auto",
            config_hash=HASH,
            capture_recipe="on",
            preview_url="http://127.0.0.1:8100/api/v1/routing/preview",
            max_inference_calls="3",
        ),
    )
    assert response.status_code == 302
    assert Target.objects.get(slug="gpt-x").capture_recipe is True


@pytest.mark.parametrize(
    "url",
    [
        "/admin/runs/call/add/",
        "/admin/runs/callevidence/add/",
        "/admin/runs/runevent/add/",
        "/admin/runs/usagecorrection/add/",
    ],
)
def test_evidence_cannot_be_added_in_the_admin(operator_client, url):
    assert operator_client.get(url).status_code == 403


def test_evidence_change_page_is_view_only(operator_client):
    call = f.call_create()
    page = operator_client.get(f"/admin/runs/call/{call.pk}/change/")
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    response = operator_client.post(f"/admin/runs/call/{call.pk}/change/", {"status": "failed"})
    assert response.status_code == 403


# --- the price table is a form (issue 23 point 5, R3) ------------------------------------------


def test_prices_are_entered_as_rows_and_stored_as_exact_decimals(operator_client):
    prices = {
        "sim-strong": {"input": "3.000001", "cached_input": "0.30", "output": "15"},
        "sim-weak": {"input": "0.15", "output": "0.6", "cache_write": "0.1875"},
    }
    response = operator_client.post("/admin/runs/target/add/", target_form(prices=prices))
    assert response.status_code == 302, response.content.decode()[:3000]
    stored = Target.objects.get(slug="gpt-x").prices
    # Exactly what was typed, as decimal strings; a blank cache bucket stays absent (unknown).
    assert stored == prices
    assert "cached_input" not in stored["sim-weak"]


def test_the_change_page_shows_prices_as_rows_not_json(operator_client):
    operator_client.post("/admin/runs/target/add/", target_form())
    target = Target.objects.get(slug="gpt-x")
    page = operator_client.get(f"/admin/runs/target/{target.pk}/change/").content.decode()
    assert 'name="prices-0-model" value="sim-strong"' in page
    assert 'name="prices-0-cached_input" value="0.3"' in page
    assert 'name="prices-0-cache_write" value=""' in page
    assert 'name="prices-1-model" value=""' in page  # a blank row to add a model
    assert '{"sim-strong"' not in page and "{&quot;sim-strong" not in page


def test_a_row_error_keeps_what_was_typed_and_saves_nothing(operator_client):
    prices = {"a": {"input": "1", "output": "2"}}
    data = target_form(prices=prices)
    data.update({"prices-1-model": "a", "prices-1-input": "5", "prices-1-output": "abc"})
    response = operator_client.post("/admin/runs/target/add/", data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["prices"]
    assert any("listed twice" in e for e in errors), errors
    assert 'name="prices-1-output" value="abc"' in response.content.decode()
    assert not Target.objects.filter(slug="gpt-x").exists()


@pytest.mark.parametrize("rows", ["abc", "-3", "99999999999"])
def test_a_hostile_row_count_is_bounded_and_harmless(operator_client, rows):
    response = operator_client.post("/admin/runs/target/add/", target_form(**{"prices-rows": rows}))
    assert response.status_code in (200, 302)
    if response.status_code == 302:  # rows read up to the bound; at most what was sent
        assert Target.objects.get(slug="gpt-x").prices in (
            {},
            {"sim-strong": {"input": "3", "cached_input": "0.3", "output": "15"}},
        )


# --- the health check (issue 23 point 5) --------------------------------------------------------


def test_health_check_gets_the_model_list_through_the_registered_endpoint(operator_client):
    from tests.runs.engine_support import sim_stats, simulator

    with simulator(["mmlu-pro"]) as url:
        target = Target.objects.create(
            slug="gpt-x", name="x", model="sim-strong", base_url=f"{url}/v1"
        )
        before = sim_stats(url)
        response = operator_client.post(f"/admin/runs/target/{target.pk}/health/", follow=True)
        after = sim_stats(url)
    assert response.status_code == 200
    text = [str(m) for m in response.context["messages"]]
    assert len(text) == 1
    assert f"{url}/v1/models: HTTP 200 in" in text[0]
    assert "the target's model is listed" in text[0]
    # No model call was sent by the check.
    assert after["chat_requests"] == before["chat_requests"]
    assert after["model_calls"] == before["model_calls"]


def test_health_check_reports_an_unreachable_endpoint_and_is_post_only(operator_client):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    target = Target.objects.create(
        slug="gpt-x", name="x", model="m", base_url=f"http://127.0.0.1:{port}/v1"
    )
    assert operator_client.get(f"/admin/runs/target/{target.pk}/health/").status_code == 405
    response = operator_client.post(f"/admin/runs/target/{target.pk}/health/", follow=True)
    text = [str(m) for m in response.context["messages"]]
    assert "no answer (ConnectError" in text[0]
    page = operator_client.get(f"/admin/runs/target/{target.pk}/change/").content.decode()
    assert "Check health" in page


def test_a_member_cannot_run_the_health_check(client):
    target = Target.objects.create(slug="t1", name="t", model="m", base_url="http://127.0.0.1:9/v1")
    client.force_login(f.user_create())
    response = client.post(f"/admin/runs/target/{target.pk}/health/")
    assert response.status_code in (302, 403)
    assert response.status_code != 200
