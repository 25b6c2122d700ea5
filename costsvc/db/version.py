"""The data version: when a cached answer is still valid (the one rule for every cache of the
cost service: costsvc/api/cache.py).

One counter in one row (``data_version``), bumped by :func:`bump` **in the transaction of every
write that can change a read answer**: an hour stored or repriced (with its run marked done),
a run started or finished, a watermark moved, an audited change (budget, token, cost model,
month close), a month marked closed, advice stored. So the version a reader sees moves in the
same commit as the data: an answer computed after reading version v holds every write up to v
(it may hold later ones too, and is then keyed under a version already past, never served
again). A version taken from a run id or an audit id — rows inserted *before* the data they
announce is written — could be read while the write was still under way, and an answer
computed then would be kept after it landed.

:func:`bump` takes the row's lock until the transaction ends; writers call it last, just
before their commit, so concurrent writers (a parallel ingest's workers) wait for each other
only for a commit. Label and owner history (the watchers' writes) do not bump it: no cached
answer reads them (docs/architecture.md, "Rules and their one home").
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, select, update

from costsvc.db.models import DataVersion

_ROW = DataVersion.id == 1


def bump(conn: Connection) -> None:
    """Announce this transaction's write: the version moves when it commits."""
    conn.execute(update(DataVersion).where(_ROW).values(version=DataVersion.version + 1))


def data_version(engine: Engine) -> int:
    """The version now: one primary-key read, outside any transaction."""
    # one statement: autocommit spares the BEGIN and the ROLLBACK round trips
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        found = conn.execute(select(DataVersion.version).where(_ROW)).scalar()
    return int(found or 0)
