from __future__ import annotations

import os
import socket

from celery import current_app
from django.db import transaction
from django.utils import timezone

from srbench.models import WorkerPing

# The task that answers a ping (srbench.tasks.worker_ping), enqueued by name: tasks import
# services, never the other way round.
WORKER_PING_TASK = "srbench.tasks.worker_ping"


def worker_ping_send() -> WorkerPing:
    """Write a ping and ring the doorbell after commit (a worker must see the row)."""
    with transaction.atomic():
        ping = WorkerPing.objects.create()
        transaction.on_commit(
            lambda: current_app.send_task(WORKER_PING_TASK, args=(ping.pk,), ignore_result=True)
        )
    return ping


def worker_ping_answer(*, ping_id: int) -> bool:
    """Idempotent: only the first delivery answers (compare-and-set on answered_at)."""
    updated = WorkerPing.objects.filter(pk=ping_id, answered_at__isnull=True).update(
        answered_at=timezone.now(), worker_hostname=socket.gethostname(), worker_pid=os.getpid()
    )
    return updated == 1
