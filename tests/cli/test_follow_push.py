"""`run` follows a run by the server's push (issue 38 item 3): the events long poll tells it of
the run's end as it commits, with a real worker driving the run against the simulator, over
HTTP and in process. Against an older server — the same API without the long poll in front of
the events — it polls as before and still prints the report."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.urls import URLPattern, clear_url_caches

from runs.models import Run
from srbench import urls as project_urls
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

QUICK = {"sim-strong": {"ttft_s": 0.05, "tokens_per_second": 200.0}}


def _run_args() -> list[str]:
    dataset = es.fixture_dataset(["mmlu-pro"])
    return ["--dataset", str(dataset.pk), "--target", "sim-strong", "--concurrency", "4"]


def test_run_follows_a_real_run_to_its_end_by_push(bench, celery_worker) -> None:  # type: ignore[no-untyped-def]
    with es.simulator(["mmlu-pro"], models=QUICK) as url:
        es.sim_targets(url)
        r = bench("run", *_run_args(), "--poll", "2")
        assert r.code == 0, (r.err, celery_worker.log()[-2000:])
    run = Run.objects.get()
    assert run.status == "completed"
    assert f"following run {run.pk}: the server pushes its end" in r.err
    assert "by polling" not in r.err
    assert "weighted subset average" in r.out and f"run {run.pk} " in r.out


# The project's URLs as a server before the long poll had them: the events route is the
# router's own view, which ignores `wait` and answers at once without `waited`.
urlpatterns = [
    p
    for p in project_urls.urlpatterns
    if not (isinstance(p, URLPattern) and str(p.pattern) == "api/v1/runs/<int:pk>/events/")
]
handler400, handler403 = project_urls.handler400, project_urls.handler403
handler404, handler500 = project_urls.handler404, project_urls.handler500


def test_run_against_an_older_server_falls_back_to_polling(bench, celery_worker) -> None:  # type: ignore[no-untyped-def]
    assert len(urlpatterns) == len(project_urls.urlpatterns) - 1
    with es.simulator(["mmlu-pro"], models=QUICK) as url, override_settings(ROOT_URLCONF=__name__):
        clear_url_caches()
        try:
            es.sim_targets(url)
            r = bench("run", *_run_args(), "--poll", "0.5")
        finally:
            clear_url_caches()
        assert r.code == 0, (r.err, celery_worker.log()[-2000:])
    run = Run.objects.get()
    assert run.status == "completed"
    assert f"following run {run.pk} by polling (the server has no events push)" in r.err
    assert "weighted subset average" in r.out
