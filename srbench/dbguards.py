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


def frozen_columns_sql(table: str, columns: list[str], why: str) -> str:
    changed = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in columns)
    return (
        f"CREATE TRIGGER {table}_frozen BEFORE UPDATE ON {table} FOR EACH ROW "
        f"WHEN ({changed}) EXECUTE FUNCTION srbench_refuse_change('{why}');"
    )


def drop_trigger_sql(table: str, suffix: str) -> str:
    return f"DROP TRIGGER IF EXISTS {table}_{suffix} ON {table};"


def run_on_postgres(statements: list[str]):  # type: ignore[no-untyped-def]
    """A RunPython body that executes the statements on PostgreSQL only."""

    def apply(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        # A plain cursor without parameters: the plpgsql body contains '%' placeholders that
        # the schema editor would try to interpolate.
        with schema_editor.connection.cursor() as cursor:
            for sql in statements:
                cursor.execute(sql)

    return apply
