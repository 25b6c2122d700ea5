"""Many rows into one table in the caller's transaction: PostgreSQL ``COPY … FROM STDIN``,
an ``executemany`` INSERT elsewhere.

An hour of 10,000 GPUs / 50,000 pods writes ~110,000 rows (``gpu_hours``, ``usage_facts``,
``chargeback``). SQLAlchemy's ``insert(table), rows`` on psycopg sends them as batched
multi-row ``INSERT … VALUES`` statements (its "insertmanyvalues" mode): every value is a bound
parameter, and the statement is parsed and planned once per batch. ``COPY`` streams the rows in
one command (psycopg 3 ``Cursor.copy`` with ``write_row``: the values adapted as in any query,
https://www.psycopg.org/psycopg3/docs/basic/copy.html). Measured: bench/rollup_scale.py
(the write phase) and ``python bench/rollup_scale.py --write-only``.

Only the columns the rows name are copied: the others take their server defaults, as they do
with the INSERT. Every row must name the same columns. On PostgreSQL every write of an hour
goes through COPY, so every PostgreSQL test of an ingest or a reprice exercises it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Table, insert
from sqlalchemy.orm import DeclarativeBase


def insert_rows(
    conn: Connection, model: type[DeclarativeBase], rows: Sequence[dict[str, Any]]
) -> None:
    """Insert ``rows`` (dicts with the same keys) into ``model``'s table."""
    if not rows:
        return
    if conn.dialect.name != "postgresql":
        conn.execute(insert(model), list(rows))
        return
    table: Table = model.__table__  # type: ignore[assignment]
    names = list(rows[0])
    columns = ", ".join(conn.dialect.identifier_preparer.quote(table.c[n].name) for n in names)
    target = conn.dialect.identifier_preparer.format_table(table)
    raw = conn.connection.driver_connection
    assert raw is not None
    with raw.cursor() as cur, cur.copy(f"COPY {target} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row[n] for n in names])
