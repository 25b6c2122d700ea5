"""Chargeback reports of a billing month: CSV for finance and FinOps FOCUS 1.2.

Both are read from the database in constant memory, rows in a fixed order, money as plain
decimal strings (never floats), UTF-8, ``\\n`` line ends. A closed month's rows never
change, so its reports are byte-identical on every export; their SHA-256 is recorded when the
month is closed (in the close's own transaction: both take a connection too).

**Never the database while a client reads.** An export over HTTP is written out in full by
:func:`spool` — one connection, one read-only transaction, as fast as the database gives the
rows — into a temporary file (in memory up to a bound, then on disk, refused past another);
the connection is back in the pool before the first byte goes to the client, so a client
that reads slowly, stalls or goes away holds a file, never a connection or a transaction.

CSV columns, in order (``group_by`` replaces the owner/placement columns by the chosen ones):
billing_month, charge_period_start, charge_period_end, charge_class (regular | correction),
cluster, team, project, stage, namespace, pod, node, gpu_model, mig_profile, currency,
gpu_hours, allocated_cost, used_cost, allocated_idle_cost, idle_cost, total_cost, energy_kwh
(idle energy spread onto the row included), idle_energy_kwh (of it), co2e_kg, container (the
holding's, "" on idle rows and rows from before containers were kept), workload (the pod's
controller as at that hour, ``<Kind>/<name>``: ``Deployment/trainer``; "" none or unknown).
Text cells from labels are spreadsheet-safe: one starting with ``=``, ``+``, ``-``, ``@``, tab
or CR gets a leading ``'``; the numeric columns are never altered.

After the month's rows, in the ungrouped CSV and in FOCUS, the Kueue borrowing policy's charges
and credits of the month's hours, a line each (costsvc/reports/queue_lines.py, docs/queues.md).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import IO, Any

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    case,
    func,
    literal,
    literal_column,
    select,
)

from costsvc.db.models import Chargeback
from costsvc.kit.csv_cells import CsvLines, csv_line, safe_cell, safe_cell_sql
from costsvc.kit.money import kg, money, money_sql
from costsvc.kit.sql_times import iso_z_sql
from costsvc.kit.times import as_utc, iso_z, parse_month
from costsvc.reports import queue_lines
from costsvc.reports.focus import ChargeRow, focus_lines
from costsvc.rules.chargeback import KEY, parse_group_by
from costsvc.rules.energy import kwh, kwh_sql

AMOUNTS = (
    "gpu_hours",
    "allocated_cost",
    "used_cost",
    "allocated_idle_cost",
    "idle_cost",
    "total_cost",
    "energy_kwh",
    "idle_energy_kwh",
    "co2e_kg",
)
# after the amounts, at the end of the ungrouped CSV: a line's container and its workload
TRAILING = ("container", "workload")
CHUNK = 2000  # rows per database fetch and per streamed piece
STREAM = {"stream_results": True, "yield_per": CHUNK}  # per statement: not the connection's


def csv_columns(group_by: list[str] | None) -> list[str]:
    if group_by:
        return ["billing_month", "charge_class", *group_by, "currency", *AMOUNTS]
    return [
        "billing_month",
        "charge_period_start",
        "charge_period_end",
        "charge_class",
        *KEY,
        "currency",
        *AMOUNTS,
        *TRAILING,
    ]


Source = Engine | Connection  # a connection: read in its transaction (the month close's)


@contextmanager
def _connection(source: Source) -> Iterator[Connection]:
    if isinstance(source, Connection):
        yield source
        return
    with source.connect() as conn:
        yield conn


def chargeback_csv(
    engine: Source,
    month: str,
    group_by: list[str] | None = None,
    team: str | None = None,
) -> Iterator[str]:
    """The month's chargeback CSV, piece by piece (``team``: that team's rows only). On
    PostgreSQL the rows are formatted by COPY (elsewhere by Python: the same bytes)."""
    parse_month(month)  # raises ValueError for a bad month
    group_by = parse_group_by(group_by) or None
    yield csv_line(csv_columns(group_by))
    c = Chargeback
    money_columns = (c.gpu_hours, c.allocated, c.used, c.waste, c.idle, *_energy_columns())
    if group_by:
        cols = [getattr(c, g) for g in group_by]
        q = (
            select(c.correction, *cols, c.currency, *(func.sum(a) for a in money_columns))
            .where(c.billing_month == month)
            .group_by(c.correction, *cols, c.currency)
            .order_by(c.correction, *cols, c.currency)
        )
        if team is not None:
            q = q.where(c.team == team)
    else:
        trailing = (c.container, c.workload)
        q = _month_rows(
            month, team, c.hour, c.correction, *_key(), c.currency, *money_columns, *trailing
        )
    if engine.dialect.name == "postgresql":
        yield from _copy_csv(engine, q, month, group_by)
    else:
        yield from _python_csv(engine, q, month, group_by)
    if not group_by:  # the borrowing policy's lines after the month's rows
        yield from _queue_csv(engine, month, team)


def _queue_csv(engine: Source, month: str, team: str | None) -> Iterator[str]:
    out = CsvLines()
    with _connection(engine) as conn:
        columns = csv_columns(None)
        lines = queue_lines.queue_lines(conn, month, team)
        out.rows([queue_lines.csv_row(ln, columns) for ln in lines])
    if text := out.take():
        yield text


def _python_csv(
    engine: Source, q: Select[Any], month: str, group_by: list[str] | None
) -> Iterator[str]:
    """The rows formatted by Python (SQLite): the same bytes as :func:`_copy_csv`."""
    out = CsvLines()
    last_hour, bounds = None, ("", "")
    n_groups, n_place = len(group_by or []), len(KEY)
    with _connection(engine) as conn:
        result = conn.execute(q, execution_options=STREAM)
        for part in result.partitions():
            rows: list[Sequence[object]] = []
            for r in part:
                tail = () if group_by else tuple(safe_cell(str(v)) for v in r[-2:])
                values = r if group_by else r[:-2]
                # sums are Decimal on PG
                gpu_h, alloc, used, waste, idle, mj, idle_mj, mg, idle_mg = map(int, values[-9:])
                amounts = (
                    money(gpu_h),
                    money(alloc),
                    money(used),
                    money(waste),
                    money(idle),
                    money(alloc + idle),
                    kwh(mj + idle_mj),
                    kwh(idle_mj),
                    kg(mg + idle_mg),
                )
                if group_by:
                    labels = [safe_cell(str(v)) for v in r[1 : 1 + n_groups]]
                    cls = "correction" if r[0] else "regular"
                    rows.append((month, cls, *labels, r[1 + n_groups], *amounts))
                else:
                    hour = r[0]
                    if hour != last_hour:  # rows come by hour: format its bounds once
                        last_hour, bounds = hour, (iso_z(hour), iso_z(hour + timedelta(hours=1)))
                    rows.append(
                        (
                            month,
                            *bounds,
                            "correction" if r[1] else "regular",
                            *map(safe_cell, r[2 : 2 + n_place]),
                            r[2 + n_place],
                            *amounts,
                            *tail,
                        )
                    )
            out.rows(rows)
            yield out.take()


def _copy_csv(
    engine: Source, q: Select[Any], month: str, group_by: list[str] | None
) -> Iterator[str]:
    """The same rows, formatted by PostgreSQL itself: ``COPY (SELECT …) TO STDOUT`` with the
    money, times and spreadsheet neutralising done in SQL — the measured hot path (a month is
    millions of rows), and byte for byte what the Python path writes."""
    sub = q.order_by(None).subquery()
    cols = list(sub.c)
    trailing = [] if group_by else cols[-2:]
    if trailing:
        cols = cols[:-2]
    gpu_h, alloc, used, waste, idle, mj, idle_mj, mg, idle_mg = cols[-9:]  # as above

    if group_by:
        n = len(group_by)
        fields = [
            literal(month),
            case((cols[0], "correction"), else_="regular"),
            *(safe_cell_sql(col) for col in cols[1 : 1 + n]),
            cols[1 + n],
        ]
        order = [cols[0], *cols[1 : 1 + n], cols[1 + n]]
    else:
        n = len(KEY)
        fields = [
            literal(month),
            iso_z_sql(cols[0]),
            iso_z_sql(cols[0] + literal_column("interval '1 hour'")),
            case((cols[1], "correction"), else_="regular"),
            *(safe_cell_sql(col) for col in cols[2 : 2 + n]),
            cols[2 + n],
        ]
        order = [cols[0], *cols[2 : 2 + n], trailing[0], cols[1]]
    fields += [
        money_sql(gpu_h),
        money_sql(alloc),
        money_sql(used),
        money_sql(waste),
        money_sql(idle),
        money_sql(alloc + idle),
        kwh_sql(mj + idle_mj),
        kwh_sql(idle_mj),
        money_sql(mg + idle_mg),  # mg as kg: six places, like micro-units
        *(safe_cell_sql(col) for col in trailing),
    ]
    outer = select(*fields).select_from(sub).order_by(*order)
    sql = str(outer.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    with _connection(engine) as conn:
        raw: Any = conn.connection.driver_connection
        with raw.cursor() as cur, cur.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)") as copy:
            pending: list[bytes] = []
            size = 0
            for data in copy:
                pending.append(bytes(data))
                size += len(data)
                if size >= 1 << 16:
                    yield b"".join(pending).decode()
                    pending, size = [], 0
            if pending:
                yield b"".join(pending).decode()


def focus_csv(engine: Source, month: str, team: str | None = None) -> Iterator[str]:
    """The month's FOCUS 1.2 CSV, piece by piece (``team``: that team's rows only)."""
    parse_month(month)
    yield from focus_lines(_charge_rows(engine, month, team), CHUNK)
    out = CsvLines()  # the borrowing policy's lines after the month's rows
    with _connection(engine) as conn:
        out.rows([queue_lines.focus_row(ln) for ln in queue_lines.queue_lines(conn, month, team)])
    if text := out.take():
        yield text


def _energy_columns() -> tuple[Any, ...]:
    c = Chargeback
    return (c.energy_mj, c.idle_energy_mj, c.co2e_mg, c.idle_co2e_mg)


def _key() -> list[Any]:
    return [getattr(Chargeback, k) for k in KEY]


def _month_rows(month: str, team: str | None, *columns: Any) -> Select[Any]:
    """The billing month's rows (``team``'s only), by hour, key and class."""
    c = Chargeback
    q = select(*columns).where(c.billing_month == month)
    if team is not None:
        q = q.where(c.team == team)
    return q.order_by(c.hour, *_key(), c.container, c.correction)


def _charge_rows(engine: Source, month: str, team: str | None) -> Iterator[ChargeRow]:
    c = Chargeback
    amounts = (c.allocated, c.used, c.waste, c.idle, c.gpu_hours, *_energy_columns())
    q = _month_rows(
        month,
        team,
        c.hour,
        c.billing_month,
        *_key(),
        c.correction,
        c.currency,
        *amounts,
        c.unit_price,
    )
    with _connection(engine) as conn:
        result = conn.execute(q, execution_options=STREAM)
        for r in result:
            yield ChargeRow(
                hour=as_utc(r[0]),
                billing_month=r[1],
                **dict(zip(KEY, r[2:11], strict=True)),
                correction=bool(r[11]),
                currency=r[12],
                allocated=int(r[13]),
                used=int(r[14]),
                waste=int(r[15]),
                idle=int(r[16]),
                gpu_hours=int(r[17]),
                energy_mj=int(r[18]),
                idle_energy_mj=int(r[19]),
                co2e_mg=int(r[20]),
                idle_co2e_mg=int(r[21]),
                unit_price=None if r[22] is None else int(r[22]),
            )


def sha256_of(pieces: Iterator[str]) -> str:
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece.encode())
    return h.hexdigest()


class ExportTooLarge(Exception):
    """An export larger than the spool may hold (``COSTSVC_EXPORT_MAX_BYTES``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"the export is larger than {limit} bytes")


def spool(pieces: Iterator[str], memory_bytes: int, max_bytes: int) -> IO[bytes]:
    """The whole report, read to its end, in a temporary file positioned at its start: in
    memory up to ``memory_bytes``, then on disk (``TMPDIR``); :class:`ExportTooLarge` past
    ``max_bytes``, ``OSError`` (ENOSPC: the disk is full) as the file system says. ``pieces``
    is closed however it ends, so its connection is released here and now, never by the
    garbage collector on some later thread."""
    out: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=memory_bytes)  # noqa: SIM115
    size = 0
    try:
        for piece in pieces:
            data = piece.encode()
            size += len(data)
            if size > max_bytes:
                raise ExportTooLarge(max_bytes)
            out.write(data)
        out.flush()
        out.seek(0)
    except BaseException:
        out.close()
        raise
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()
    return out
