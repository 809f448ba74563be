from django.db import models


class WorkerPing(models.Model):
    """A doorbell test: the web side writes a row, a worker answers it through the broker.

    Used by `benchmark doctor` and by the tests that prove a task crosses the real broker.
    """

    created_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    worker_hostname = models.CharField(max_length=255, blank=True)
    worker_pid = models.PositiveIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"ping {self.pk}"
