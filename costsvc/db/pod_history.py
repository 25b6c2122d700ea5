"""What the Kubernetes watchers keep of each pod as history: rows valid in
[valid_from, valid_to) — open while ``valid_to`` is NULL — per pod uid of one cluster. A change
closes the open row and opens a new one; a deleted pod closes its row, so a pod deleted
yesterday is still known as it was. :class:`PodHistory` is the one base of the pod label
history (costsvc/labels/history.py ``LabelHistory``) and the pod owner history
(costsvc/advice/repository.py ``OwnerHistory``); which rows are in force over a span is the
label history's rule (costsvc/labels/history.py ``in_force_during``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar

from sqlalchemy import Connection, Engine, insert, select, update
from sqlalchemy.sql import ColumnElement

from costsvc.kit.times import as_utc

V = TypeVar("V")


def next_period(
    conn: Connection,
    t: Any,
    key: Sequence[Any],
    unchanged: Callable[[Any], bool],
    at: datetime,
    since: datetime | None,
) -> datetime | None:
    """When a new row of the pod history ``t`` (rows valid in [valid_from, valid_to), open while
    ``valid_to`` is NULL) starts for what is observed at ``at``: None when the open row of
    ``key`` already holds it (``unchanged(row)``); else the open row is closed at the start
    returned — never before that row opened. A pod never seen before dates from ``since``
    (its creation)."""
    row = conn.execute(select(*t.__table__.c).where(*key, t.valid_to.is_(None))).first()
    if row is not None:
        if unchanged(row):
            return None
        start = max(at, as_utc(row.valid_from) + timedelta(microseconds=1))
        conn.execute(update(t).where(t.id == row.id).values(valid_to=start))
        return start
    if since is not None and conn.execute(select(t.id).where(*key).limit(1)).first() is None:
        return min(since, at)
    return at


def keep_latest(out: dict[Any, tuple[datetime, V]], key: Any, since: datetime, value: V) -> None:
    """``value`` for ``key`` in ``out`` unless a row that started later is there already: where
    an object changed within a period, its latest state."""
    at = as_utc(since)
    if key not in out or at >= out[key][0]:
        out[key] = (at, value)


class ClusterRows:
    """A store of one cluster's rows in tables with a ``cluster`` column."""

    def __init__(self, engine: Engine, cluster: str) -> None:
        self._engine = engine
        self._cluster = cluster

    def _add(self, conn: Connection, t: Any, **values: Any) -> None:
        """A row of ``t`` in this cluster with ``values`` (column -> value)."""
        conn.execute(insert(t).values(cluster=self._cluster, **values))

    def _match(self, t: Any, **key: Any) -> list[ColumnElement[bool]]:
        """What selects the rows of ``t`` in this cluster that hold ``key`` (column -> value)."""
        return [t.cluster == self._cluster, *(getattr(t, k) == v for k, v in key.items())]


class PodHistory(ClusterRows):
    """One cluster's history of something about each pod, in the table :attr:`table` (columns
    cluster, uid, namespace, name, valid_from, valid_to and what is kept)."""

    table: ClassVar[Any]

    def _observe(
        self,
        uid: str,
        namespace: str,
        name: str,
        kept: Mapping[str, Any],
        unchanged: Callable[[Any], bool],
        at: datetime,
        since: datetime | None,
    ) -> None:
        """The pod has ``kept`` (column -> value) at ``at`` (a new pod: ``since`` its
        creation); nothing is written when its open row holds it (``unchanged(row)``)."""
        t = self.table
        with self._engine.begin() as conn:
            start = next_period(conn, t, self._match(t, uid=uid), unchanged, at, since)
            if start is None:
                return
            self._add(conn, t, uid=uid, namespace=namespace, name=name, **kept, valid_from=start)

    def close_pod(self, uid: str, at: datetime) -> None:
        t = self.table
        with self._engine.begin() as conn:
            conn.execute(
                update(t).where(*self._match(t, uid=uid), t.valid_to.is_(None)).values(valid_to=at)
            )

    def close_missing_pods(self, present: set[str], at: datetime) -> None:
        """After a (re)list: pods we had open that the API no longer has were deleted."""
        t = self.table
        with self._engine.connect() as conn:
            open_uids = set(
                conn.execute(
                    select(t.uid).where(t.cluster == self._cluster, t.valid_to.is_(None))
                ).scalars()
            )
        for uid in open_uids - present:
            self.close_pod(uid, at)
