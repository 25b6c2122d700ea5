"""The one place engines are made (never at import time); whether the database answers, and
what an error says of the database itself (unreachable, its disk full) rather than of one
statement."""

from __future__ import annotations

import errno

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DBAPIError

APPLICATION = "gpu-costsvc"
SQLITE_BUSY_TIMEOUT = 60.0  # seconds a writer waits for another's write lock on SQLite


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        return create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT})
    # the API serves requests from a thread pool (40 threads): enough connections for a burst
    # prepare_threshold=None: no server-side prepared statements, so PostgreSQL plans every
    # range query for its actual bounds (a generic plan made a month's scan 2-4x slower)
    # application_name: the service's sessions in pg_stat_activity
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=20,
        connect_args={"prepare_threshold": None, "application_name": APPLICATION},
    )


def reachable(engine: Engine) -> bool:
    """Whether the database answers a trivial query."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception:
        return False
    return True


class DatabaseTrouble(Exception):
    """The database itself failed — unreachable, or out of disk space — not a statement: the
    message names the database (its URL without a password) and says which."""


PG_DISK_FULL = "53100"  # PostgreSQL's disk_full (Appendix A, "PostgreSQL Error Codes")
SQLITE_FULL = 13  # "database or disk is full" (sqlite.org/rescode.html#full)


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the database's disk (or an operating-system quota) is full."""
    orig = getattr(exc, "orig", None) or exc
    if isinstance(orig, OSError) and orig.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if getattr(orig, "sqlstate", None) == PG_DISK_FULL:
        return True
    return getattr(orig, "sqlite_errorcode", None) == SQLITE_FULL


def trouble(engine: Engine, exc: BaseException) -> DatabaseTrouble | None:
    """What ``exc``, raised by a database call, says of the database itself: its disk full,
    or (it does not answer a trivial query now) unreachable; None when the database is
    there and well, and the error was this statement's."""
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    first = (detail[0] if detail else type(exc).__name__)[:300]
    where = engine.url.render_as_string(hide_password=True)
    if disk_full(exc):
        return DatabaseTrouble(f"the database {where} is out of disk space: {first}")
    if isinstance(exc, DBAPIError) and not reachable(engine):
        return DatabaseTrouble(f"the database {where} is unreachable: {first}")
    return None
