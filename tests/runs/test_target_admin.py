"""Operators register targets in the admin; the API key is write-only (issue 2)."""

import io
import json

import pytest
from django.core.management import call_command

from runs.models import Target, TargetSecret
from runs.services import target_api_key
from tests import factories as f

pytestmark = pytest.mark.django_db

KEY = "sk-live-THIS-MUST-NEVER-LEAK-8c1f"
HASH = "e" * 64


def target_form(**over):
    data = {
        "slug": "gpt-x",
        "name": "GPT X",
        "kind": "single",
        "active": "on",
        "base_url": "http://127.0.0.1:8100/v1",
        "model": "sim-strong",
        "api_key": KEY,
        "api_key_env": "",
        "fixed_params": json.dumps({"temperature": 0}),
        "prices": json.dumps({"sim-strong": {"input": "3", "cached_input": "0.3", "output": "15"}}),
        "config_hash": "",
        "preview_url": "",
        "max_inference_calls": "",
    }
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
        ({"prices": json.dumps({"m": {"input": "x", "output": "1"}})}, "prices", "not a decimal"),
        ({"prices": json.dumps({"m": {"input": "1"}})}, "prices", "'output' price is required"),
        ({"prices": json.dumps({"m": {"input": 0.1, "output": "1"}})}, "prices", "decimal string"),
        ({"prices": json.dumps({"m": {"input": "-1", "output": "1"}})}, "prices", "≥ 0"),
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
