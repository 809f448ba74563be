"""A target's fixed parameters are checked (issue 35 item 7): the admin refuses
`{"temperature": "hot"}` with a clear error and saves nothing, and a plan refuses a target
stored with bad ones before any model call. One rule: `runs.planning.fixed_params.fixed_params_errors`."""

from __future__ import annotations

import html
import json

import pytest

from runs.models import Target
from runs.planning.fixed_params import fixed_params_errors
from runs.planning.plans import PlanError, plan_freeze
from tests import factories as f
from tests.runs.engine_support import fixture_dataset
from tests.runs.test_target_admin import target_form

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(client):
    client.force_login(f.user_create(staff=True))
    return client


def post(client, params):  # type: ignore[no-untyped-def]
    response = client.post("/admin/runs/target/add/", target_form(fixed_params=json.dumps(params)))
    return response, html.unescape(response.content.decode())


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"temperature": "hot"},
            "temperature: 'hot' is not valid; it must be a number from 0 to 2.",
        ),
        ({"temperature": 2.5}, "temperature: 2.5 is not valid; it must be a number from 0 to 2."),
        ({"temperature": True}, "temperature: True is not valid"),
        ({"top_p": 1.5}, "top_p: 1.5 is not valid; it must be a number from 0 to 1."),
        ({"max_tokens": 0}, "max_tokens: 0 is not valid; it must be an integer from 1 to"),
        ({"max_tokens": 12.5}, "max_tokens: 12.5 is not valid; it must be an integer"),
        ({"seed": "7"}, "seed: '7' is not valid; it must be an integer."),
        ({"stop": 5}, "stop: 5 is not valid; it must be a non-empty string or a list"),
        ({"stop": ["a", 1]}, "stop: ['a', 1] is not valid"),
        # PostgreSQL's jsonb keeps no U+0000: it was a 500 at the save (outside probe "ka").
        ({"stop": "\x00"}, "stop: '\\x00' is not valid; it must be a non-empty string or a list"),
        ({"stop": ["a", "b\x00"]}, "none holding NUL"),
        (
            {"presence_penalty": -3},
            "presence_penalty: -3 is not valid; it must be a number from -2 to 2.",
        ),
        ({"frequency_penalty": 2.1}, "frequency_penalty: 2.1 is not valid"),
        ({"logit_bias": {"1": 5}}, "'logit_bias' is not a parameter a target may fix (allowed: "),
        ({"model": "other"}, "'model' is not a parameter a target may fix"),
    ],
)
def test_the_admin_refuses_bad_fixed_parameters_and_saves_nothing(operator_client, params, message):
    response, page = post(operator_client, params)
    assert response.status_code == 200  # the form again, with its errors
    assert message in page
    assert not Target.objects.filter(slug="gpt-x").exists()


def test_the_admin_saves_valid_fixed_parameters(operator_client):
    params = {
        "temperature": 0.7,
        "top_p": 1,
        "max_tokens": 512,
        "seed": -3,
        "stop": ["\n\n", "END"],
        "presence_penalty": -2,
        "frequency_penalty": 0.5,
        "reasoning_effort": "low",
    }
    response, page = post(operator_client, params)
    assert response.status_code == 302, page[:2000]
    assert Target.objects.get(slug="gpt-x").fixed_params == params


def test_every_problem_is_named_at_once():
    assert fixed_params_errors({"temperature": "hot", "n": 3}) == [
        "'n' is not a parameter a target may fix (allowed: temperature, top_p, top_k, seed, "
        "presence_penalty, frequency_penalty, reasoning_effort, stop, max_tokens).",
        "temperature: 'hot' is not valid; it must be a number from 0 to 2.",
    ]
    assert fixed_params_errors(["temperature"]) != []
    assert fixed_params_errors({}) == [] == fixed_params_errors({"stop": "END", "top_k": 40})


def test_a_plan_refuses_a_target_stored_with_bad_fixed_parameters():
    dataset = fixture_dataset(["mmlu-pro"], per_benchmark=2)
    hot = f.target_create(fixed_params={"temperature": "hot"})
    with pytest.raises(PlanError) as caught:
        plan_freeze(data={"name": "hot", "dataset": dataset.pk, "targets": [hot.slug]})
    assert caught.value.errors == {
        "fixed_params": {
            hot.slug: ["temperature: 'hot' is not valid; it must be a number from 0 to 2."]
        }
    }

    fine = f.target_create(fixed_params={"temperature": 0, "max_tokens": 256})
    frozen = plan_freeze(data={"name": "fine", "dataset": dataset.pk, "targets": [fine.slug]})
    assert frozen.manifest["targets"][0]["fixed_params"] == {"temperature": 0, "max_tokens": 256}
