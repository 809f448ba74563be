from celery import shared_task


@shared_task(ignore_result=True)
def worker_ping(ping_id: int) -> None:
    """Answer a WorkerPing: proves a message crossed the broker and a worker wrote to the DB."""
    from srbench.services import worker_ping_answer

    worker_ping_answer(ping_id=ping_id)
