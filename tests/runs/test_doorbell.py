"""The workers' doorbell sends tasks by name (issue 36 item 1): the names it sends are the names
the worker registers, so a renamed task fails here instead of queueing messages nobody takes."""

from celery import current_app

from runs.engine.doorbell import RUN_DRIVE_TASK, RUN_REGRADE_TASK


def test_the_names_the_doorbell_sends_are_registered_tasks() -> None:
    import runs.tasks

    current_app.loader.import_default_modules()
    # shared_task hands out a proxy; the registered task's body is the module's function.
    assert current_app.tasks[RUN_DRIVE_TASK].run is runs.tasks.run_drive.run
    assert current_app.tasks[RUN_REGRADE_TASK].run is runs.tasks.run_regrade_task.run
    assert RUN_DRIVE_TASK != RUN_REGRADE_TASK
