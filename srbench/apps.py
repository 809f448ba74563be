from django.apps import AppConfig


class SrbenchConfig(AppConfig):
    name = "srbench"
    verbose_name = "srbench core"

    def ready(self) -> None:
        # Every Django process (web, manage.py, tests) gets the project's Celery app before any
        # task is sent: shared tasks bind to it, not to Celery's default app.
        from srbench import celery  # noqa: F401
