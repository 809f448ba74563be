"""The Celery app. Tasks carry IDs only; every claim happens in the database (DESIGN §4)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings")

app = Celery("srbench")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
