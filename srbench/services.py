from __future__ import annotations

import os
import socket

from django.db import transaction
from django.utils import timezone

from srbench.models import WorkerPing


def worker_ping_send() -> WorkerPing:
    """Write a ping and ring the doorbell after commit (a worker must see the row)."""
    from srbench.tasks import worker_ping

    with transaction.atomic():
        ping = WorkerPing.objects.create()
        transaction.on_commit(lambda: worker_ping.delay(ping.pk))
    return ping


def worker_ping_answer(*, ping_id: int) -> bool:
    """Idempotent: only the first delivery answers (compare-and-set on answered_at)."""
    updated = WorkerPing.objects.filter(pk=ping_id, answered_at__isnull=True).update(
        answered_at=timezone.now(), worker_hostname=socket.gethostname(), worker_pid=os.getpid()
    )
    return updated == 1
