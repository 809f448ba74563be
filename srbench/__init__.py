"""srbench. The Celery app is created when Django starts (`SrbenchConfig.ready`) or when a
worker loads `srbench.celery` (`celery -A srbench`), not on import of this package: the console
script's remote path (`srbench.cli.remote`) imports it without Django or Celery."""
