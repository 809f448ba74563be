"""Live Results count the gateway's notes as calls land (fourth outside probe item 2): per (run,
target of the cell, role, waste) how many calls' cost notes say the stream carried no usage,
that the usage is a gateway's estimate, that a gateway re-sent the request upstream, and how
many a LiteLLM gateway answered (its kept header) — the four counts of
`runs.reporting.effective.NOTE_COUNTS`, which the full report reads from the calls. A running
run's report read none of them until the run ended: its spend was not said to be a lower bound
and no caution was shown. Migration 0011's call triggers and its apply function are replaced
by the same ones with these four columns; the existing sums are backfilled under the locks
0011 takes.

The words are frozen here as of this migration (`runs.ledger.accounting`'s constants);
tests/runs/test_live_notes.py holds them equal to the rule's home, so a change of the words
needs a new migration. Plain comparisons (`right`, `starts_with`), never LIKE: the words hold
`_`, which LIKE would read as a wildcard."""

from importlib import import_module

from django.db import migrations, models

from srbench.dbguards import run_on_postgres

live = import_module("runs.migrations.0011_live_sums")

# As of this migration: runs.ledger.accounting.NO_STREAM_USAGE_NOTE, GATEWAY_ESTIMATE_NOTE,
# GATEWAY_RESENT_START, GATEWAY_ANSWERED_HEADER.
NO_STREAM_USAGE_NOTE = "usage missing: no usage object"
GATEWAY_ESTIMATE_NOTE = "usage is a gateway's estimate, not the server's: tokens, cost unknown"
GATEWAY_RESENT_START = "the gateway re-sent this request"
GATEWAY_ANSWERED_HEADER = "x-litellm-version"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _notes(row: str) -> dict[str, str]:
    """Per count: which call rows it counts (``row``: the alias of a call row)."""

    def ends(text: str) -> str:
        return f"right({row}.cost_note, {len(text)}) = {_literal(text)}"

    return {
        "no_stream_usage": ends(NO_STREAM_USAGE_NOTE),
        "usage_estimated": ends(GATEWAY_ESTIMATE_NOTE),
        "gateway_resent": f"starts_with({row}.cost_note, {_literal(GATEWAY_RESENT_START)})",
        "gateway_answered": f"{row}.response_headers ? {_literal(GATEWAY_ANSWERED_HEADER)}",
    }


NOTES = _notes("x")  # x: a row of the statement's transition table
CALL_COLS = (*live.CALL_COLS, *NOTES)
CALL_COLUMNS = f"{live.CALL_COLUMNS}, cost_note, response_headers"
CALL_IN = f"SELECT 1 AS sg, {CALL_COLUMNS} FROM new_rows"
CALL_OUT = f"SELECT -1 AS sg, {CALL_COLUMNS} FROM old_rows"


def _call_delta(src: str, cols: tuple[str, ...], notes: dict[str, str]) -> str:
    """Migration 0011's call delta, with the note counts beside the sums."""
    sums = ",\n      ".join(
        [
            "sum(sg) AS calls",
            *[
                f"coalesce(sum(sg * x.{c}{'::numeric' if c == 'duration_ms' else ''}), 0) AS {c}, "
                f"coalesce(sum(sg) FILTER (WHERE x.{c} IS NOT NULL), 0) AS {c}_known"
                for c in live.SUMMED
            ],
            *[f"coalesce(sum(sg) FILTER (WHERE {q}), 0) AS {n}" for n, q in notes.items()],
        ]
    )
    return f"""SELECT * FROM (
    SELECT cell.run_id, cell.target_id, x.role, x.status IN {live.WASTE} AS waste,
      {sums}
    FROM ({src}) x JOIN runs_cell cell ON cell.id = x.cell_id
    GROUP BY cell.run_id, cell.target_id, x.role, x.status IN {live.WASTE}
  ) d WHERE {live._nonzero(cols)}"""


def _calls_body(src: str, subject: str | None, cols: tuple[str, ...], notes: dict) -> str:
    body = live._pending(live.CALLS_T, live.CALL_KEY, cols, _call_delta(src, cols, notes))
    if subject:
        body += f"\n  {live._pending(live.CELLS_T, live.CELL_KEY, live.CELL_COLS, subject)}"
    return body


def _functions(cols: tuple[str, ...], notes: dict[str, str], into: str, out: str) -> list[str]:
    bodies = {
        "srbench_live_calls_insert": _calls_body(into, live.SUBJECT_ADDED, cols, notes),
        "srbench_live_calls_update": _calls_body(f"{into} UNION ALL {out}", None, cols, notes),
        "srbench_live_calls_delete": _calls_body(out, live.SUBJECT_REMOVED, cols, notes),
    }
    apply = live._function(
        "srbench_live_apply",
        f"{live._apply(live.CELLS_T, live.CELL_KEY, live.CELL_COLS)}\n  "
        f"{live._apply(live.CALLS_T, live.CALL_KEY, cols)}",
    )
    return [apply, *[live._function(name, body) for name, body in bodies.items()]]


_counts = ", ".join(f"count(*) FILTER (WHERE {q}) AS {n}" for n, q in _notes("c").items())
# Backfill: every existing sums row's counts from its calls, once, under 0011's locks.
BACKFILL = [
    f"UPDATE {live.CALLS_T} s SET "
    + ", ".join(f"{n} = b.{n}" for n in NOTES)
    + f" FROM (SELECT cell.run_id, cell.target_id, c.role, c.status IN {live.WASTE} AS waste, "
    f"{_counts} FROM runs_call c JOIN runs_cell cell ON cell.id = c.cell_id "
    f"GROUP BY cell.run_id, cell.target_id, c.role, c.status IN {live.WASTE}) b "
    "WHERE s.run_id = b.run_id AND s.target_id = b.target_id AND s.role = b.role "
    "AND s.waste = b.waste;"
]
PENDING_ADD = [
    f"ALTER TABLE {live.CALLS_T}_pending "
    + ", ".join(f"ADD COLUMN {n} bigint NOT NULL DEFAULT 0" for n in NOTES)
    + ";"
]
PENDING_DROP = [
    f"ALTER TABLE {live.CALLS_T}_pending " + ", ".join(f"DROP COLUMN {n}" for n in NOTES) + ";"
]
LOCK = "LOCK TABLE runs_run, runs_cell, runs_call IN SHARE MODE;"
FORWARD = [
    LOCK,
    *PENDING_ADD,
    *_functions(CALL_COLS, NOTES, CALL_IN, CALL_OUT),
    *BACKFILL,
]
BACKWARD = [
    LOCK,
    *_functions(live.CALL_COLS, {}, live.CALL_IN, live.CALL_OUT),
    *PENDING_DROP,
]


class Migration(migrations.Migration):
    dependencies = [("runs", "0024_run_request_sha256")]

    operations = [
        *[
            migrations.AddField(
                model_name="livecallsums",
                name=name,
                field=models.BigIntegerField(default=0, db_default=0),
            )
            for name in NOTES
        ],
        migrations.RunPython(run_on_postgres(FORWARD), run_on_postgres(BACKWARD)),
    ]
