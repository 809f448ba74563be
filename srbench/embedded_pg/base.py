"""Django database engine for the embedded default: PostgreSQL's own engine, plus starting (or
reusing) the embedded server before a connection is opened. One SQL dialect everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db.backends.postgresql import base

from srbench import embedded_pg


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        embedded_pg.ensure(Path(self.settings_dict["PGDATA"]))
        return super().get_new_connection(conn_params)
