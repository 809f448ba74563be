"""A run with a recipe-capturing MoM target captures the router's recipe before its first call,
and every call independently confirms the config hash (R12.2, R12.3)."""

import pytest

from recipes.models import Recipe
from recipes.selectors import recipe_confirmations
from runs.models import Call, RunEvent
from runs.planning.services import run_create
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker


def test_run_start_captures_the_recipe_once_and_calls_confirm_the_hash(celery_worker):
    with es.simulator(["mmlu-pro"]) as url:
        targets = es.sim_targets(url)
        router = targets["router"]
        router.capture_recipe = True
        router.preview_url = f"{url}/api/v1/routing/preview"
        router.save()
        dataset = es.fixture_dataset(["mmlu-pro"])
        run, _ = run_create(
            owner=f.user_create(),
            plan={"name": "recipe", "dataset": dataset.pk, "targets": ["sim-router"]},
        )
        wait_until(lambda: es.terminal(run), timeout=90)
    assert run.status == "completed"
    recipe = Recipe.objects.get(run=run, target=router)
    first_call = Call.objects.filter(cell__run=run).order_by("sent_at").first()
    assert recipe.captured_at <= first_call.sent_at
    assert recipe.active_config_hash == router.config_hash
    captured = RunEvent.objects.get(run=run, type="recipe.captured")
    sent = RunEvent.objects.filter(run=run, type="call.sent").order_by("seq").first()
    assert captured.seq < sent.seq
    counts = recipe_confirmations(run=run, target=router)
    assert counts["calls"] == counts["confirmed"] == Call.objects.filter(cell__run=run).count()
    assert counts["mismatched"] == 0
