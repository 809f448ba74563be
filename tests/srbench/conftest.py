"""Fixtures of the embedded-PostgreSQL and demo tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from srbench import embedded_pg


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the unprivileged server account can reach (pytest's tmp_path is 0700); any
    embedded server started under it is stopped when the test ends."""
    path = Path(tempfile.mkdtemp(prefix="srbench-emb-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for pgdata in path.glob("**/PG_VERSION"):
            embedded_pg.stop(pgdata.parent)
        shutil.rmtree(path, ignore_errors=True)
