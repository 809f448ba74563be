"""Many ledger rows' updates in one PostgreSQL statement (issue 25): the engine's closes,
finishes, stream checkpoints and lease renewals (runs/engine/store.py) each send one statement
whatever the number of rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, models


def bulk_update_sql(
    model: type[models.Model],
    *,
    keys: tuple[str, ...],
    fields: tuple[str, ...],
    rows: list[tuple[Any, ...]],
    where: str = "",
    extra_set: str = "",
    returning: bool = False,
) -> list[int]:
    """Many rows' updates in ONE PostgreSQL statement: UPDATE … FROM unnest(one array per
    column) matched on `keys`, each row carrying its own values of `fields`. `where` adds
    conditions on the target row (alias t), so a guarded update stays guarded row by row.
    Returns the updated ids when `returning`. Values go through the fields' own database
    preparation (JSON, Decimal, datetimes) and are passed as parameters, one array per column
    cast to the column's type.

    The statement's text depends on the columns only, never on the number of rows: psycopg
    parses it once and caches it (statements under 4 KiB; a close of 27 columns is 1.9),
    where a VALUES list of one placeholder per value was parsed again on every call (a fifth
    of the ledger thread at concurrency 256). Nor is there a count of parameters to bound:
    the rows go in one statement."""
    if not rows:
        return []
    qn = connection.ops.quote_name
    cols = [model._meta.get_field(name) for name in (*keys, *fields)]
    arrays = ", ".join(f"%s::{_value_type(c)}[]" for c in cols)
    names = ", ".join(qn(c.column) for c in cols)
    sets = [f"{qn(c.column)} = v.{qn(c.column)}" for c in cols[len(keys) :]]
    if extra_set:
        sets.append(extra_set)
    match = " AND ".join(f"t.{qn(c.column)} = v.{qn(c.column)}" for c in cols[: len(keys)])
    sql = (
        f"UPDATE {qn(model._meta.db_table)} AS t SET {', '.join(sets)} "
        f"FROM unnest({arrays}) AS v ({names}) WHERE {match}"
        + (f" AND {where}" if where else "")
        + (" RETURNING t.id" if returning else "")
    )
    # This thread's connection itself: through the `connection` proxy, each of the many
    # values' preparations would look it up again.
    db = connections[DEFAULT_DB_ALIAS]
    values = zip(*rows, strict=True)  # by column
    params = [
        [c.get_db_prep_save(v, db) for v in column] for c, column in zip(cols, values, strict=True)
    ]
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        return [r[0] for r in cursor.fetchall()] if returning else []


def _value_type(field: models.Field) -> str:
    """The column's type without its length or precision: an explicit cast to varchar(n) would
    silently truncate, whereas the assignment to the column refuses a value too long, as an
    ORM update does."""
    base = field.db_type(connection).split("(")[0].strip()
    return "text" if base == "varchar" else base


def first_per_key(items: list[tuple[int, Any]], key: Callable[[Any], Any]) -> tuple[list, list]:
    """Split (index, op) pairs into the first op per key and the later repeats: one UPDATE …
    FROM updates a row once whichever of its matches it takes, and repeats must see the first
    one's effect."""
    seen: set[Any] = set()
    first, repeats = [], []
    for item in items:
        k = key(item[1])
        (repeats if k in seen else first).append(item)
        seen.add(k)
    return first, repeats
