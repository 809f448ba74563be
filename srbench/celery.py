"""The Celery app. Tasks carry IDs only; every claim happens in the database (DESIGN §4)."""

import os

import kombu
from celery import Celery
from celery.app.amqp import AMQP

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings")


class BrokerConnection(kombu.Connection):
    """kombu's Connection, except that ``collect()`` leaves nothing for a later ``close()``.

    Why (issue 34 item 2, docs/reliability.md "Broker restarts"): when a worker loses its broker,
    Celery 5.7.0's ``Consumer.on_connection_error_after_connected`` first ``collect()``s the
    connection — that closes what it can without talking to the broker and detaches the
    transport (``transport.client = None``) — and then ``close()``s the same connection again.
    ``collect()`` keeps its reference to the default channel, so ``close()`` closes that channel
    a second time, now without a transport. With Redis, the first close of the consuming
    channel stops at its pending BRPOP (the server is gone) and the second one gets further:
    it drops the channel's connection pool and, holding an unacknowledged message (every
    ``run_drive`` is ``acks_late`` and runs for the whole run), tries to give it back to Redis
    through a new pool built from ``transport.client`` — None: ``AttributeError: 'NoneType'
    object has no attribute 'hostname'``. That is not a connection error, so nothing catches
    it and the worker exits ("Unrecoverable error"). Forgetting the default channel once it has
    been collected makes the second close a no-op, as it was before Celery 5.7 (which only
    collected): the channel keeps its pool, so the task still running on it acks through it
    once the broker is back (or logs "Couldn't ack" while it is not), and the consumer
    reconnects on a new connection.
    """

    def collect(self, socket_timeout: float | None = None) -> None:
        try:
            super().collect(socket_timeout)
        finally:
            self._default_channel = None


class BrokerAMQP(AMQP):
    Connection = BrokerConnection


app = Celery("srbench", amqp=BrokerAMQP)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
