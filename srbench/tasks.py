"""Celery tasks of the project app. Tasks sit above services: they import the service they run,
and services enqueue them by name (``WORKER_PING_TASK``), so no import runs back up."""

from celery import shared_task

from srbench.services import WORKER_PING_TASK, worker_ping_answer


@shared_task(name=WORKER_PING_TASK, ignore_result=True)
def worker_ping(ping_id: int) -> None:
    """Answer a WorkerPing: proves a message crossed the broker and a worker wrote to the DB."""
    worker_ping_answer(ping_id=ping_id)
