"""A task crosses the real broker and a real worker process writes to the real database
(issue 2, DESIGN §1). The embedded default's broker is covered by tests/srbench/test_demo.py."""

import os

import pytest

from srbench.models import WorkerPing
from srbench.services import worker_ping_send
from tests.conftest import wait_until

pytestmark = [pytest.mark.worker]


def test_task_crosses_the_broker_and_a_worker_process_answers(celery_worker):
    ping = worker_ping_send()

    answered = wait_until(
        lambda: WorkerPing.objects.filter(pk=ping.pk, answered_at__isnull=False).first(),
        timeout=60,
    )

    assert answered.worker_pid is not None
    assert answered.worker_pid != os.getpid(), "answered in-process: not a real worker"
    assert celery_worker.process.poll() is None, celery_worker.log()


def test_a_redelivered_ping_is_answered_once(celery_worker):
    from srbench.tasks import worker_ping

    ping = worker_ping_send()
    first = wait_until(
        lambda: WorkerPing.objects.filter(pk=ping.pk, answered_at__isnull=False).first(),
        timeout=60,
    )
    worker_ping.delay(ping.pk)  # the same message again, as a broker redelivery would
    second_ping = worker_ping_send()  # a later message proves the duplicate was consumed
    wait_until(
        lambda: WorkerPing.objects.filter(pk=second_ping.pk, answered_at__isnull=False).exists(),
        timeout=60,
    )

    assert WorkerPing.objects.get(pk=ping.pk).answered_at == first.answered_at
