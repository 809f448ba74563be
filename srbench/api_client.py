"""The API client behind `manage.py benchmark`: one code path for local and remote use.

With `--url` (or SRBENCH_URL) it talks HTTP to a server with a token; without, it calls the
same API in-process through httpx's WSGI transport, authenticated as a local user.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from srbench.keepalive import KEEPALIVE_EXPIRY_S

# Exit codes of every verb: 0 done, 1 the run ended but did not complete, 2 refused or failed
# (one `error:` line), 3 the API stayed unreachable after the retries below — the server side
# may have gone on (a run keeps running): the line says how to resume without repeating work.
EXIT_FAILED = 2
EXIT_UNREACHABLE = 3

# A web process restarting (a deploy, a crash, an OOM kill) drops connections for seconds.
# Requests that are safe to repeat — reads, and POSTs carrying an Idempotency-Key the server
# deduplicates — are retried with backoff for up to this long; other writes never are.
RETRY_SECONDS = 60.0
RETRY_FIRST_DELAY = 0.25
RETRY_MAX_DELAY = 4.0
RETRY_STATUSES = frozenset({502, 503, 504})  # a proxy in front of a web process that is down
# No response, or the connection broke before a whole one arrived: the request may or may not
# have been handled, so only a request that is safe to repeat is repeated.
RETRY_ERRORS = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)


class CliError(Exception):
    """A failure to show the user in one line; the command exits non-zero."""

    exit_code = EXIT_FAILED


class ApiUnreachable(CliError):
    """The API did not answer within the retry budget (or a request that is not safe to
    repeat lost its connection). The caller adds how to resume."""

    exit_code = EXIT_UNREACHABLE


def cli_error(message: str, exit_code: int = EXIT_FAILED) -> int:
    """Print one `error:` line (messages name file/row/field and stay greppable in CI logs)
    and give the exit code."""
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    return exit_code


def cli_guard(handler: Callable[[dict[str, Any]], int]) -> Callable[[dict[str, Any]], int]:
    """A verb's handler whose CliError becomes one line and its exit code (3 when the API
    stayed unreachable, 2 otherwise), never a traceback."""

    def run(options: dict[str, Any]) -> int:
        try:
            return handler(options)
        except CliError as exc:
            return cli_error(str(exc), exc.exit_code)
        except Exception as exc:
            # The in-process API on a database that is missing or not migrated yet (a fresh
            # var/, before `make demo`): say what to do, not a 40-line traceback. (Django's
            # database layer is looked up, not imported: a remote verb runs without Django.)
            db = sys.modules.get("django.db.utils")
            if db is None or not isinstance(exc, db.ProgrammingError | db.OperationalError):
                raise
            if "does not exist" in str(exc) or isinstance(exc, db.OperationalError):
                return cli_error(
                    f"the database is not ready ({str(exc).splitlines()[0]}); run "
                    "`python manage.py migrate` (make demo does it) or check DATABASE_URL",
                    EXIT_UNREACHABLE,
                )
            raise

    return run


def json_file_read(path: str, what: str) -> Any:
    """A JSON file the user named (`--plan-file`, `--plan`, `--messages-file`). Missing,
    unreadable, not UTF-8, not JSON, or JSON the API would refuse (too deep, a lone surrogate,
    NUL, a non-finite number): one CliError naming the file, never a traceback."""
    from srbench.json_values import json_value_problem, refuse_constant

    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=refuse_constant)
    except (OSError, ValueError, RecursionError) as exc:
        raise CliError(f"cannot read {what} {path}: {exc}") from exc
    if problem := json_value_problem(value):
        raise CliError(f"cannot read {what} {path}: {problem[1]}")
    return value


def text_file_write(path: str, text: str, what: str) -> None:
    """Write an `--output` file; a path that cannot be written is one CliError (exit 2)."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot write {what} {path}: {exc}") from exc


def retry_seconds() -> float:
    raw = os.environ.get("SRBENCH_RETRY_SECONDS")
    if raw in (None, ""):
        return RETRY_SECONDS
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise CliError(f"SRBENCH_RETRY_SECONDS must be a number of seconds, got {raw!r}") from None


def is_repeatable(method: str, headers: Any) -> bool:
    """GET/HEAD, or a POST the server deduplicates by its Idempotency-Key."""
    method = method.upper()
    if method in ("GET", "HEAD"):
        return True
    return method == "POST" and bool(httpx.Headers(headers or {}).get("Idempotency-Key"))


LOCAL_ACCOUNT = "srbench-local"


def _local_user(username: str | None) -> Any:
    """Who an in-process command acts as: the named user; else the only operator; else, on
    an installation with no operator account yet (a fresh machine, a script), the local
    system account, created on demand with an unusable password so it can never log in."""
    from django.contrib.auth import get_user_model

    users = get_user_model().objects.filter(is_active=True)
    if username:
        user = users.filter(username=username).first()
        if user is None:
            raise CliError(f"no active user {username!r} (create one, or pass --user)")
        return user
    staff = list(users.filter(is_staff=True).exclude(username=LOCAL_ACCOUNT)[:2])
    if len(staff) == 1:
        return staff[0]
    if staff:
        raise CliError(
            "say which user runs this command: --user NAME or SRBENCH_USER "
            "(several operator accounts found)"
        )
    user, created = get_user_model().objects.get_or_create(
        username=LOCAL_ACCOUNT, defaults={"is_staff": True}
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def _in_process_app(user: Any) -> Any:
    """The project's WSGI application, authenticating every request as `user` the way DRF's
    test tools force authentication: no token is written for a local command.

    The request signals normally close the database connection around each request; in
    process the connection is the command's own (possibly inside a transaction), so the
    call keeps it, as Django's test client does."""
    from django.core import signals
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import close_old_connections

    class InProcessHandler(WSGIHandler):
        def get_response(self, request: Any) -> Any:
            request._force_auth_user = user
            return super().get_response(request)

        def __call__(self, environ: Any, start_response: Any) -> Any:
            signals.request_started.disconnect(close_old_connections)
            signals.request_finished.disconnect(close_old_connections)
            try:
                response = super().__call__(environ, start_response)
                try:
                    body = b"".join(response)
                finally:
                    response.close()
            finally:
                signals.request_started.connect(close_old_connections)
                signals.request_finished.connect(close_old_connections)
            return [body]

    return InProcessHandler()


class ApiClient:
    def __init__(
        self,
        *,
        url: str | None = None,
        token: str | None = None,
        user: str | None = None,
        timeout: float = 60.0,
        retry_for: float | None = None,
        notice: Callable[[str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        url = url or os.environ.get("SRBENCH_URL")
        token = token or os.environ.get("SRBENCH_TOKEN")
        # In process there is no connection to lose: nothing is retried.
        self.retry_for = (retry_seconds() if retry_for is None else retry_for) if url else 0.0
        self.notice = notice or (lambda line: print(line, file=sys.stderr, flush=True))
        self.sleep, self.clock = sleep, clock
        self.reached = False  # whether the server ever answered (or took) a request of ours
        if url:
            if not token:
                raise CliError("a remote --url needs --token or SRBENCH_TOKEN")
            self.http = httpx.Client(
                base_url=url.rstrip("/") + "/api/v1/",
                timeout=timeout,
                # A request that is not repeatable must not cross the server's idle close.
                limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
            )
            self.http.headers["Authorization"] = f"Token {token}"
        else:
            import logging

            # In-process, a 4xx is the CLI's own answer to show in one line, not a server log.
            logging.getLogger("django.request").setLevel(logging.ERROR)
            app = _in_process_app(_local_user(user or os.environ.get("SRBENCH_USER")))
            self.http = httpx.Client(
                transport=httpx.WSGITransport(app=app),
                base_url="http://localhost/api/v1/",
                timeout=timeout,
            )

    def request(
        self, method: str, path: str, *, reads_only: bool = False, **kwargs: Any
    ) -> httpx.Response:
        """One request; when it is repeatable (`is_repeatable`, or `reads_only`: a POST that
        changes nothing, e.g. the comparison's POST compare/) a lost connection or a 502/503/
        504 is retried with exponential backoff for up to `retry_for` seconds, with one notice
        line per outage. A server that never answered this client is not waited for (a wrong
        URL fails at once, exit 2). Raises ApiUnreachable (exit 3) when the API stays away or a
        request that is not repeatable lost its connection, CliError otherwise."""
        if "json" in kwargs:
            # httpx would raise from inside its encoder on a lone surrogate (an argument that
            # was not valid UTF-8) or a NaN: one line instead of a traceback.
            try:
                body = json.dumps(
                    kwargs.pop("json"), ensure_ascii=False, allow_nan=False, separators=(",", ":")
                )
                kwargs["content"] = body.encode("utf-8")
            except ValueError as exc:
                raise CliError(f"cannot send {method.upper()} {path}: {exc}") from exc
            kwargs["headers"] = {
                **(kwargs.get("headers") or {}),
                "Content-Type": "application/json",
            }
        repeatable = self.retry_for > 0 and (
            reads_only or is_repeatable(method, kwargs.get("headers"))
        )
        deadline = self.clock() + self.retry_for
        delay = RETRY_FIRST_DELAY
        noticed = False
        while True:
            try:
                response = self.http.request(method, path, **kwargs)
            except RETRY_ERRORS as exc:
                problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if never_sent and not self.reached:
                    # Never answered this client: a wrong URL or a server that is not up.
                    raise CliError(f"cannot reach the srbench API: {exc}") from exc
                self.reached = True
                if not repeatable:
                    raise ApiUnreachable(
                        f"lost the connection to the srbench API during {method.upper()} "
                        f"{path} ({problem}); not retried: "
                        + (
                            "the request was not sent"
                            if never_sent
                            else "the request may or may not have been handled"
                        )
                    ) from exc
            except httpx.HTTPError as exc:
                raise CliError(f"cannot reach the srbench API: {exc}") from exc
            else:
                self.reached = True
                if not (repeatable and response.status_code in RETRY_STATUSES):
                    if noticed:
                        self.notice("  the srbench API answers again")
                    return response
                problem = f"HTTP {response.status_code}"
            if self.clock() + delay > deadline:
                raise ApiUnreachable(
                    f"cannot reach the srbench API ({problem}); gave up after retrying "
                    f"{method.upper()} {path} for {self.retry_for:g}s"
                )
            if not noticed:
                self.notice(
                    f"  the srbench API is unreachable ({problem}); retrying {method.upper()} "
                    f"{path} for up to {self.retry_for:g}s"
                )
                noticed = True
            self.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY)

    def json(
        self, method: str, path: str, *, ok: tuple[int, ...] = (200, 201), **kwargs: Any
    ) -> Any:
        response = self.request(method, path, **kwargs)
        if response.status_code not in ok:
            raise CliError(api_error_message(response))
        return response.json()


def api_error_message(response: httpx.Response) -> str:
    """The one `error:` line of every API refusal (issue 36 item 2): every endpoint answers
    ``{error, code, detail}`` (srbench.api's one exception handler), shown here as the API's
    own message, its code in brackets, then what the detail lists — each conflict, each refused
    candidate run with its differences, or the detail itself as compact JSON. Whitespace is
    folded so it stays one greppable line."""
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:300]}"
    if not isinstance(body, dict) or "error" not in body:
        return f"HTTP {response.status_code}: {body}"
    message = f"{body['error']} ({body.get('code')})"
    detail = body.get("detail")
    if isinstance(detail, dict) and isinstance(detail.get("conflicts"), list):
        message += ": " + " | ".join(str(c.get("detail")) for c in detail["conflicts"])
    elif isinstance(detail, dict) and isinstance(detail.get("refused"), list):
        # A comparison refusing every candidate run (409): say why for each of them.
        message += ": " + " | ".join(refused_text(r) for r in detail["refused"])
    elif detail:
        message += f": {json.dumps(detail, ensure_ascii=False)}"
    return " ".join(message.split())


def refused_text(refused: Any) -> str:
    """One refused candidate run of a comparison: its id and every difference."""
    if not isinstance(refused, dict):
        return str(refused)
    differences = refused.get("differences") or []
    reasons = "; ".join(str(d.get("text")) for d in differences if isinstance(d, dict))
    return f"run {refused.get('run')}: {reasons}"


# While a followed run is near its end, it is polled this often instead of every --poll.
FOLLOW_NEAR_END_POLL = 0.1


class RunFollower:
    """How long a command following a run waits before its next poll.

    The user's `--poll` while the run is far from its end. Near it — every cell settled but the
    run not ended yet, or the cells left would take less than two polls at the rate seen so far
    — every FOLLOW_NEAR_END_POLL seconds, so the report prints about a tenth of a second after
    the run ends instead of up to a whole poll later. A poll costs the server the same at any
    run size (issue 25), so the few extra ones at the end are cheap."""

    def __init__(self, poll: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.poll = poll
        self.clock = clock
        self.first: tuple[float, int] | None = None

    def wait(self, run: dict[str, Any]) -> float:
        """Seconds to wait after seeing `run` (the API's run document)."""
        near = min(self.poll, FOLLOW_NEAR_END_POLL)
        progress = run.get("progress") or {}
        total = progress.get("denominator")
        settled = (progress.get("completed") or 0) + (progress.get("failed") or 0)
        now = self.clock()
        if self.first is None:
            self.first = (now, settled)
        if not total:
            return self.poll
        if settled >= total:
            return near
        since, settled_then = self.first
        if settled > settled_then and now > since:
            rate = (settled - settled_then) / (now - since)
            if (total - settled) / rate <= 2 * self.poll:
                return near
        return self.poll


def add_connection_arguments(parser: Any) -> None:
    parser.add_argument("--url", help="srbench server (default: in-process, or SRBENCH_URL)")
    parser.add_argument("--token", help="API token for --url (or SRBENCH_TOKEN)")
    parser.add_argument("--user", help="local user for in-process use (or SRBENCH_USER)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def client_from(options: dict[str, Any]) -> ApiClient:
    return ApiClient(url=options.get("url"), token=options.get("token"), user=options.get("user"))
