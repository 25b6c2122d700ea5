"""Many rows into one table in the caller's transaction: PostgreSQL ``COPY … FROM STDIN``,
an ``executemany`` INSERT elsewhere.

An hour of 10,000 GPUs / 50,000 pods writes ~110,000 rows (``gpu_hours``, ``usage_facts``,
``chargeback``). SQLAlchemy's ``insert(table), rows`` on psycopg sends them as batched
multi-row ``INSERT … VALUES`` statements (its "insertmanyvalues" mode): every value is a bound
parameter, and the statement is parsed and planned once per batch. ``COPY`` streams the rows in
one command (psycopg 3 ``Cursor.copy`` with ``write_row``: the values adapted as in any query,
https://www.psycopg.org/psycopg3/docs/basic/copy.html). Measured: bench/rollup_scale.py
(the write phase) and ``python bench/rollup_scale.py --write-only``. The COPY is binary where
every column has a plain type (the writer's tables): each value is sent in PostgreSQL's binary
form for the column's type (``Copy.set_types``) instead of formatted and escaped as text —
the same stored values, a third of the client CPU (bench/store_hour.py: an hour of 1,000
GPUs / 5,000 pods, Python CPU of ``store_hour`` 65 -> 25 ms with the tuple rows below).

Only the columns the rows name are copied: the others take their server defaults, as they do
with the INSERT. Every row must name the same columns. On PostgreSQL every write of an hour
goes through COPY, so every PostgreSQL test of an ingest or a reprice exercises it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    DateTime,
    Integer,
    SmallInteger,
    String,
    Table,
    insert,
)
from sqlalchemy.orm import DeclarativeBase


def insert_rows(
    conn: Connection, model: type[DeclarativeBase], rows: Sequence[dict[str, Any]]
) -> None:
    """Insert ``rows`` (dicts with the same keys) into ``model``'s table."""
    if rows:
        names = list(rows[0])
        insert_tuples(conn, model, names, [[row[n] for n in names] for row in rows])


def insert_tuples(
    conn: Connection,
    model: type[DeclarativeBase],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
) -> None:
    """Insert ``rows`` (values in the order of the columns ``names``) into ``model``'s table.
    The writer's own path: a row built as a tuple goes to ``write_row`` as it is (a dict per
    row, then a list per row, was ~1/4 of the write's Python time at 5,000 pods)."""
    if not rows:
        return
    if conn.dialect.name != "postgresql":
        conn.execute(insert(model), [dict(zip(names, row, strict=True)) for row in rows])
        return
    table: Table = model.__table__  # type: ignore[assignment]
    quote = conn.dialect.identifier_preparer.quote
    columns = ", ".join(quote(table.c[n].name) for n in names)
    target = conn.dialect.identifier_preparer.format_table(table)
    types = binary_types(table, tuple(names))
    binary = " (FORMAT BINARY)" if types else ""
    raw = conn.connection.driver_connection
    assert raw is not None
    with raw.cursor() as cur, cur.copy(f"COPY {target} ({columns}) FROM STDIN{binary}") as copy:
        if types:
            copy.set_types(types)
        write = copy.write_row
        for row in rows:
            write(row)


# PostgreSQL's binary COPY needs each column's exact type; these are all the writer's tables use
_BINARY = (
    (BigInteger, "int8"),
    (SmallInteger, "int2"),
    (Integer, "int4"),
    (String, "varchar"),
    (Boolean, "bool"),
)


@cache
def binary_types(table: Table, names: tuple[str, ...]) -> list[str] | None:
    """The PostgreSQL type of each column, for a binary COPY (values sent in their binary form:
    ~1/3 of the client CPU of the text form, where every value is formatted and escaped); None
    where a column's type is not one of the plain ones (then the text COPY)."""
    types = []
    for n in names:
        kind = table.c[n].type
        if isinstance(kind, DateTime):
            types.append("timestamptz" if kind.timezone else "timestamp")
            continue
        found = next((name for t, name in _BINARY if isinstance(kind, t)), None)
        if found is None:
            return None
        types.append(found)
    return types
