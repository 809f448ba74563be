"""Many ledger rows' writes in one PostgreSQL statement: the engine's closes, finishes, stream
checkpoints and lease renewals (runs/engine/store.py) each send one UPDATE whatever the number
of rows (issue 25); its opened calls, their evidence and the run's events one INSERT, built
without Django's model instances (issue 38 item 2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.utils import timezone


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
    cols = [_column(model, name) for name in (*keys, *fields)]
    # This thread's connection itself: through the `connection` proxy, each of the many
    # values' preparations would look it up again.
    db = connections[DEFAULT_DB_ALIAS]
    arrays, params = _column_arrays(cols, rows, db)
    names = ", ".join(_quoted(c) for c in cols)
    sets = [f"{_quoted(c)} = v.{_quoted(c)}" for c in cols[len(keys) :]]
    if extra_set:
        sets.append(extra_set)
    match = " AND ".join(f"t.{_quoted(c)} = v.{_quoted(c)}" for c in cols[: len(keys)])
    sql = (
        f"UPDATE {qn(model._meta.db_table)} AS t SET {', '.join(sets)} "
        f"FROM unnest({arrays}) AS v ({names}) WHERE {match}"
        + (f" AND {where}" if where else "")
        + (" RETURNING t.id" if returning else "")
    )
    return [r[0] for r in _execute(db, sql, params, fetch=returning)]


def bulk_insert_sql(
    model: type[models.Model],
    *,
    fields: tuple[str, ...],
    rows: list[tuple[Any, ...]],
    returning: tuple[str, ...] = (),
) -> list[tuple[Any, ...]]:
    """Many new rows in ONE PostgreSQL statement: INSERT … SELECT FROM unnest(one array per
    column of `fields`), each value through its field's own database preparation and passed as
    a parameter, as in `bulk_update_sql`. Every other column gets what a model instance would
    give it: its default (`Field.get_default`: a blank string, `{}`, 0), the time for an
    `auto_now(_add)` field, nothing (the database's default or null) for a field with a database
    default or a nullable one without a default — the same row `QuerySet.bulk_create` writes,
    without building a model instance per row (22 µs a row there against 5.5 here, measured
    on the run events, issue 38 item 2). Returns the `returning` columns of each new row, in no
    promised order: a caller matches them to its rows by a unique key."""
    if not rows:
        return []
    qn = connection.ops.quote_name
    meta = model._meta
    cols = [_column(model, name) for name in fields]
    given = {c.name for c in cols}
    constants: list[tuple[models.Field, Any]] = []
    now = timezone.now()
    for field in meta.concrete_fields:
        if field.name in given or field.primary_key or field.db_default is not models.NOT_PROVIDED:
            continue
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            constants.append((field, now))
        elif field.has_default() or not field.null:
            constants.append((field, field.get_default()))
    db = connections[DEFAULT_DB_ALIAS]
    arrays, columns = _column_arrays(cols, rows, db)
    extra = "".join(f", %s::{_value_type(f)}" for f, _ in constants)
    names = ", ".join(_quoted(c) for c in [*cols, *(f for f, _ in constants)])
    # In the statement's order: the constants of the select list, then one array per column.
    params: list[Any] = [f.get_db_prep_save(v, db) for f, v in constants] + columns
    back = ", ".join(_quoted(_column(model, name)) for name in returning)
    sql = (
        f"INSERT INTO {qn(meta.db_table)} ({names}) SELECT v.*{extra} FROM unnest({arrays}) AS v"
        + (f" RETURNING {back}" if returning else "")
    )
    return _execute(db, sql, params, fetch=bool(returning))


def _execute(db: Any, sql: str, params: list[Any], *, fetch: bool) -> list[tuple[Any, ...]]:
    """Run one of these statements with its parameters bound by the server in binary (psycopg's
    `%b`) — in Django's cursor wrapper all the same (its error translation, execute wrappers
    and query log). Django's own cursor binds on the client: psycopg quotes every value of
    every array into the statement's text in Python, the largest single cost of the ledger
    thread (docs/performance.md); binary arrays skip that, and the statement, whose text does
    not depend on the number of rows, is prepared once per connection."""
    if "%b" in sql:
        raise ValueError("bulk statements bind with %s only")
    db.ensure_connection()
    with db._prepare_cursor(psycopg.Cursor(db.connection)) as cursor:
        cursor.execute(sql.replace("%s", "%b"), params)
        return cursor.fetchall() if fetch else []


def _column_arrays(
    cols: list[models.Field], rows: list[tuple[Any, ...]], db: Any
) -> tuple[str, list[list[Any]]]:
    """The `%s::type[]` list of one array per column and those arrays: each row's values,
    column by column, through the field's own database preparation."""
    arrays = ", ".join(f"%s::{_value_type(c)}[]" for c in cols)
    values = zip(*rows, strict=True)  # by column
    params = [
        [c.get_db_prep_save(v, db) for v in column] for c, column in zip(cols, values, strict=True)
    ]
    return arrays, params


def _column(model: type[models.Model], name: str) -> models.Field:
    """The model's field of that name, which must be a column of its table."""
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or field.column is None:
        raise ValueError(f"{name} is not a column of {model.__name__}")
    return field


def _quoted(field: models.Field) -> str:
    return connection.ops.quote_name(str(field.column))


def _value_type(field: models.Field) -> str:
    """The column's type without its length or precision: an explicit cast to varchar(n) would
    silently truncate, whereas the assignment to the column refuses a value too long, as an
    ORM update does."""
    base = (field.db_type(connection) or "").split("(")[0].strip()
    return "text" if base == "varchar" else base


def first_per_key(items: list[tuple[int, Any]], key: Callable[[Any], Any]) -> tuple[list, list]:
    """Split (index, op) pairs into the first op per key and the later repeats: one UPDATE …
    FROM updates a row once whichever of its matches it takes, and repeats must see the first
    one's effect."""
    seen: set[Any] = set()
    first: list[tuple[int, Any]] = []
    repeats: list[tuple[int, Any]] = []
    for item in items:
        k = key(item[1])
        (repeats if k in seen else first).append(item)
        seen.add(k)
    return first, repeats
