"""PostgreSQL triggers that make the ledger's immutable records immutable for every writer.

The ORM guards (srbench.ledger) stop our own code; these stop everything else too (a shell,
a raw SQL fix, a future bug). They raise SQLSTATE 23000, which Django surfaces as
IntegrityError. SQLite (the embedded default) relies on the ORM guards only.
"""

from __future__ import annotations

from typing import Any

FUNCTION_SQL = """
CREATE OR REPLACE FUNCTION srbench_refuse_change() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'srbench: % on % is refused: %', TG_OP, TG_TABLE_NAME, TG_ARGV[0]
    USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
"""


def append_only_sql(table: str) -> str:
    return (
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION srbench_refuse_change('append-only record');"
    )


def frozen_columns_sql(
    table: str, columns: list[str], why: str, *, any_update: bool = False
) -> str:
    """Refuse a change of these columns. The trigger fires only for an UPDATE whose SET list
    names one of them (`UPDATE OF`): a status or lease update never compares — and so never
    decompresses — a large jsonb it did not touch (a run's manifest, a call's request: measured
    55–77 ms per event batch on a 100,000-case run). `any_update` gives the older form that
    fires on every UPDATE (kept for migrations that must restore it)."""
    changed = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in columns)
    event = "UPDATE" if any_update else f"UPDATE OF {', '.join(columns)}"
    return (
        f"CREATE TRIGGER {table}_frozen BEFORE {event} ON {table} FOR EACH ROW "
        f"WHEN ({changed}) EXECUTE FUNCTION srbench_refuse_change('{why}');"
    )


def frozen_columns_recreate_sql(
    specs: list[tuple[str, list[str], str]], *, any_update: bool
) -> list[str]:
    """Drop and create again the frozen-column trigger of each (table, columns, why)."""
    out = []
    for table, columns, why in specs:
        out.append(drop_trigger_sql(table, "frozen"))
        out.append(frozen_columns_sql(table, columns, why, any_update=any_update))
    return out


def drop_trigger_sql(table: str, suffix: str) -> str:
    return f"DROP TRIGGER IF EXISTS {table}_{suffix} ON {table};"


def run_on_postgres(statements: list[str]):  # type: ignore[no-untyped-def]
    """A RunPython body that executes the statements (PostgreSQL is the only database)."""

    def apply(apps: Any, schema_editor: Any) -> None:
        # A plain cursor without parameters: the plpgsql body contains '%' placeholders that
        # the schema editor would try to interpolate.
        with schema_editor.connection.cursor() as cursor:
            for sql in statements:
                cursor.execute(sql)

    return apply


def terminal_run_settled_sql(terminal: tuple[str, ...]) -> list[str]:
    """A run is terminal only when nothing of it is open: no call `sent`/`streaming`, no cell
    `running` (a client that stops polling at a terminal status must hold the final ledger).

    A constraint trigger deferred to commit, so the closing transaction may settle its calls
    and cells and set the status in either order; the check reads the run as it is then. It
    fires only when a run becomes terminal: runs that ended before the guard existed are
    settled by recovery's reconciliation, not refused on every later write.
    """
    statuses = ", ".join(f"'{s}'" for s in terminal)
    function = f"""
CREATE OR REPLACE FUNCTION srbench_run_terminal_settled() RETURNS trigger AS $$
DECLARE
  current_status text;
  open_calls bigint;
  running_cells bigint;
BEGIN
  SELECT status INTO current_status FROM runs_run WHERE id = NEW.id;
  IF current_status IS NULL OR current_status NOT IN ({statuses}) THEN
    RETURN NULL;
  END IF;
  SELECT count(*) INTO running_cells FROM runs_cell
    WHERE run_id = NEW.id AND status = 'running';
  SELECT count(*) INTO open_calls FROM runs_call c JOIN runs_cell ce ON ce.id = c.cell_id
    WHERE ce.run_id = NEW.id AND c.status IN ('sent', 'streaming');
  IF open_calls > 0 OR running_cells > 0 THEN
    RAISE EXCEPTION 'srbench: run % cannot be % with % open call(s) and % running cell(s)',
      NEW.id, current_status, open_calls, running_cells
      USING ERRCODE = 'integrity_constraint_violation',
        HINT = 'settle open calls (sent_unknown) and running cells first';
  END IF;
  RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""

    def trigger(suffix: str, event: str, when: str) -> str:
        return (
            f"CREATE CONSTRAINT TRIGGER runs_run_{suffix} AFTER {event} ON runs_run "
            f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ({when}) "
            "EXECUTE FUNCTION srbench_run_terminal_settled();"
        )

    becomes_terminal = f"NEW.status IN ({statuses})"
    return [
        function,
        trigger(
            "terminal_settled",
            "UPDATE OF status",
            f"{becomes_terminal} AND OLD.status IS DISTINCT FROM NEW.status",
        ),
        trigger("terminal_settled_on_insert", "INSERT", becomes_terminal),
    ]


def _call_fenced_function(statuses: str) -> str:
    """An open call only under its cell's current claim, in a run that has not ended."""
    return f"""
CREATE OR REPLACE FUNCTION srbench_call_fenced() RETURNS trigger AS $$
DECLARE
  cell_status text;
  cell_token bigint;
  run_status text;
BEGIN
  IF TG_OP = 'UPDATE' AND NOT (OLD.status = 'sent' AND NEW.status = 'streaming') THEN
    RAISE EXCEPTION 'srbench: call % cannot go from % back to %', NEW.id, OLD.status, NEW.status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF TG_OP = 'INSERT' THEN
    SELECT c.status, c.claim_token INTO cell_status, cell_token
      FROM runs_cell c WHERE c.id = NEW.cell_id FOR SHARE;
  ELSE
    SELECT c.status, c.claim_token INTO cell_status, cell_token
      FROM runs_cell c WHERE c.id = NEW.cell_id;
  END IF;
  SELECT r.status INTO run_status FROM runs_run r JOIN runs_cell c ON c.run_id = r.id
    WHERE c.id = NEW.cell_id;
  IF run_status IN ({statuses}) THEN
    RAISE EXCEPTION 'srbench: no open call in run that is %', run_status
      USING ERRCODE = 'integrity_constraint_violation', HINT = 'fencing: the run has ended';
  END IF;
  IF cell_status IS DISTINCT FROM 'running' OR NEW.claim_token IS NULL
     OR NEW.claim_token <> cell_token THEN
    RAISE EXCEPTION 'srbench: call on cell % refused: the cell is % under claim %, not claim %',
      NEW.cell_id, cell_status, cell_token, NEW.claim_token
      USING ERRCODE = 'integrity_constraint_violation',
        HINT = 'fencing: the worker lost its claim on this cell';
  END IF;
  RETURN NEW;
END;
$$ LANGUAGE plpgsql;
"""


def _cell_fenced_function(statuses: str) -> str:
    """No cell becomes running in a run that has ended (the run row locked first)."""
    return f"""
CREATE OR REPLACE FUNCTION srbench_cell_fenced() RETURNS trigger AS $$
DECLARE
  run_status text;
BEGIN
  SELECT status INTO run_status FROM runs_run WHERE id = NEW.run_id FOR NO KEY UPDATE;
  IF run_status IN ({statuses}) THEN
    RAISE EXCEPTION 'srbench: cell % cannot be running in run % that is %',
      NEW.id, NEW.run_id, run_status
      USING ERRCODE = 'integrity_constraint_violation', HINT = 'fencing: the run has ended';
  END IF;
  RETURN NEW;
END;
$$ LANGUAGE plpgsql;
"""


def _evidence_fenced_function() -> str:
    """No evidence for a call settled as sent_unknown."""
    return """
CREATE OR REPLACE FUNCTION srbench_evidence_fenced() RETURNS trigger AS $$
DECLARE
  call_status text;
BEGIN
  SELECT status INTO call_status FROM runs_call WHERE id = NEW.call_id;
  IF call_status = 'sent_unknown' THEN
    RAISE EXCEPTION 'srbench: evidence for call % refused: the call is settled (%)',
      NEW.call_id, call_status
      USING ERRCODE = 'integrity_constraint_violation',
        HINT = 'fencing: the worker lost its claim on this call';
  END IF;
  RETURN NEW;
END;
$$ LANGUAGE plpgsql;
"""


def fencing_sql(terminal: tuple[str, ...]) -> list[str]:
    """Fencing in the database (issue 34): whatever code path writes, a worker that lost its
    claim cannot send, reopen or record.

    - an open call (`sent`/`streaming`) is inserted only for a cell that is `running` under the
      call's `claim_token`, in a run that is not terminal; the cell row is locked (FOR SHARE)
      so that a concurrent settlement either sees the call or is seen by it;
    - a call never moves back to `sent`/`streaming` from a settled status (only `sent` ->
      `streaming`), and then only while its cell is still running under its claim;
    - no cell becomes `running` in a terminal run (the run row is locked first, the order
      every ledger writer takes: run -> cell -> call);
    - a call settled as `sent_unknown` never changes status again;
    - no evidence is recorded for a call settled as `sent_unknown` (a close records its
      evidence with its outcome, in the transaction that checks the claim; the recovery pass
      settles open calls as `sent_unknown`, so a stale worker's evidence always meets this).
    """
    statuses = ", ".join(f"'{s}'" for s in terminal)
    call_fn, cell_fn = _call_fenced_function(statuses), _cell_fenced_function(statuses)
    evidence_fn = _evidence_fenced_function()
    return [
        call_fn,
        cell_fn,
        evidence_fn,
        "CREATE TRIGGER runs_call_fenced_insert BEFORE INSERT ON runs_call FOR EACH ROW "
        "WHEN (NEW.status IN ('sent', 'streaming')) EXECUTE FUNCTION srbench_call_fenced();",
        "CREATE TRIGGER runs_call_fenced_update BEFORE UPDATE OF status ON runs_call "
        "FOR EACH ROW WHEN (NEW.status IN ('sent', 'streaming') "
        "AND OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION srbench_call_fenced();",
        "CREATE TRIGGER runs_cell_fenced_insert BEFORE INSERT ON runs_cell FOR EACH ROW "
        "WHEN (NEW.status = 'running') EXECUTE FUNCTION srbench_cell_fenced();",
        "CREATE TRIGGER runs_cell_fenced_update BEFORE UPDATE OF status ON runs_cell "
        "FOR EACH ROW WHEN (NEW.status = 'running' AND OLD.status IS DISTINCT FROM NEW.status) "
        "EXECUTE FUNCTION srbench_cell_fenced();",
        "CREATE TRIGGER runs_callevidence_fenced BEFORE INSERT ON runs_callevidence "
        "FOR EACH ROW EXECUTE FUNCTION srbench_evidence_fenced();",
        # A call settled as sent_unknown stays so: a stale worker's close cannot complete it.
        "CREATE TRIGGER runs_call_settled BEFORE UPDATE OF status ON runs_call FOR EACH ROW "
        "WHEN (OLD.status = 'sent_unknown' AND NEW.status IS DISTINCT FROM OLD.status) "
        "EXECUTE FUNCTION srbench_refuse_change('settled call (sent_unknown)');",
    ]


FENCING_TRIGGERS = (
    ("runs_call", "fenced_insert"),
    ("runs_call", "fenced_update"),
    ("runs_cell", "fenced_insert"),
    ("runs_cell", "fenced_update"),
    ("runs_callevidence", "fenced"),
    ("runs_call", "settled"),
)
FENCING_FUNCTIONS = ("srbench_call_fenced", "srbench_cell_fenced", "srbench_evidence_fenced")


AUDIT_TABLE = "srbench_auditevent"


def audit_trail_sql() -> list[str]:
    """The audit trail is append-only for every writer (issue 40 item 4): an UPDATE or DELETE
    of a row is refused, as the ledger's records are. (TRUNCATE, a whole-table statement of the
    database owner, is not a row change; the test suite's flush uses it.)"""
    return [FUNCTION_SQL, append_only_sql(AUDIT_TABLE)]
