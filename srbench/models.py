from django.conf import settings
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


# A token's secret says it is one of ours (and secret scanners find it); the prefix shown in
# lists is its first PREFIX_LENGTH characters, enough to tell a member's tokens apart.
SECRET_PREFIX = "srb_"
PREFIX_LENGTH = 12


class ApiToken(models.Model):
    """An API token a member manages in the portal (issue 40 item 5): named, shown once.

    Only a SHA-256 digest of the secret is stored, beside its first characters (the prefix a
    person recognises it by); a revoked token is kept, with who revoked it and when, so the
    list and the audit trail still name it.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens", db_index=True
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=PREFIX_LENGTH)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class AuditEvent(models.Model):
    """One write a person made (issue 40 item 4): who, when, what and from where.

    Append-only: the database refuses an UPDATE or DELETE of a row (srbench/dbguards.py). The
    actor is kept by id and name without a foreign key, so deleting an account neither
    cascades into nor rewrites its history.
    """

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    actor = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=200, db_index=True)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=500)
    query = models.CharField(max_length=500, blank=True)
    target = models.CharField(max_length=200, blank=True)
    status_code = models.PositiveSmallIntegerField()
    via = models.CharField(max_length=20)
    address = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=300, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor or '?'} {self.action}"
