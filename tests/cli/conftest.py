"""Run a `benchmark` verb two ways: over HTTP against a live server with a token, and
in-process through the same API (issue 7: one code path, both transports tested)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from tests import factories as f


@dataclass
class Result:
    code: int
    out: str
    err: str


class Bench:
    def __init__(self, capsys, connection: list[str]) -> None:  # type: ignore[no-untyped-def]
        self.capsys = capsys
        self.connection = connection

    def __call__(self, *args: str) -> Result:
        self.capsys.readouterr()
        code = 0
        try:
            call_command("benchmark", *args, *self.connection)
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = self.capsys.readouterr()
        return Result(code, out, err)


@pytest.fixture(params=["http", "in-process"])
def bench(request, live_server, capsys):  # type: ignore[no-untyped-def]
    """`bench(verb, *args)` → Result; the transport is the fixture's parameter."""
    ops = f.user_create(username="ops", staff=True)
    if request.param == "http":
        token, _ = Token.objects.get_or_create(user=ops)
        connection = ["--url", live_server.url, "--token", token.key]
    else:
        connection = ["--user", "ops"]
    return Bench(capsys, connection)
