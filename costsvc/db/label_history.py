"""Pod and namespace labels kept as history: one row per distinct label set with its validity
[valid_from, valid_to). A relabelled pod closes its old row and opens a new one, a deleted pod
closes its row — so a pod deleted yesterday is still charged to the team it had. Ingestion
asks :meth:`LabelHistory.labels_during` for the labels in force during an hour; the Kubernetes
watcher (costsvc/k8slabels.py) writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, or_, select, update

from costsvc.db.models import NamespaceLabels, PodLabels
from costsvc.utc import as_utc


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return as_utc(value)


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


class LabelHistory:
    def __init__(self, engine: Engine, cluster: str) -> None:
        self._engine = engine
        self._cluster = cluster

    # -- writing --------------------------------------------------------------------------

    def observe_pod(
        self,
        uid: str,
        namespace: str,
        name: str,
        labels: dict[str, str],
        at: datetime,
        since: datetime | None = None,
    ) -> None:
        """The pod has ``labels`` at ``at``. A pod not seen before has had them ``since``
        (its creation); a change to a pod we know takes effect at ``at``."""
        t = PodLabels
        with self._engine.begin() as conn:
            start = next_period(
                conn,
                t,
                (t.cluster == self._cluster, t.uid == uid),
                lambda row: (row.labels, row.namespace, row.name) == (labels, namespace, name),
                at,
                since,
            )
            if start is None:
                return
            conn.execute(
                insert(t).values(
                    cluster=self._cluster,
                    uid=uid,
                    namespace=namespace,
                    name=name,
                    labels=labels,
                    valid_from=start,
                )
            )

    def close_pod(self, uid: str, at: datetime) -> None:
        t = PodLabels
        with self._engine.begin() as conn:
            conn.execute(
                update(t)
                .where(t.cluster == self._cluster, t.uid == uid, t.valid_to.is_(None))
                .values(valid_to=at)
            )

    def observe_namespace(
        self, name: str, labels: dict[str, str], at: datetime, since: datetime | None = None
    ) -> None:
        t = NamespaceLabels
        with self._engine.begin() as conn:
            query = select(t.id, t.labels, t.valid_from).where(
                t.cluster == self._cluster, t.name == name, t.valid_to.is_(None)
            )
            open_row = conn.execute(query).first()
            start = at
            if open_row is not None:
                if open_row.labels == labels:
                    return
                opened = _aware(open_row.valid_from)
                assert opened is not None
                start = max(at, opened + timedelta(microseconds=1))
                conn.execute(update(t).where(t.id == open_row.id).values(valid_to=start))
            elif since is not None:
                last = conn.execute(
                    select(func.max(t.valid_to)).where(t.cluster == self._cluster, t.name == name)
                ).scalar()
                start = min(since, at) if last is None else max(min(since, at), _aware(last) or at)
            conn.execute(
                insert(t).values(cluster=self._cluster, name=name, labels=labels, valid_from=start)
            )

    def close_namespace(self, name: str, at: datetime) -> None:
        t = NamespaceLabels
        with self._engine.begin() as conn:
            conn.execute(
                update(t)
                .where(t.cluster == self._cluster, t.name == name, t.valid_to.is_(None))
                .values(valid_to=at)
            )

    def close_missing_pods(self, present: set[str], at: datetime) -> None:
        """After a (re)list: pods we had open that the API no longer has were deleted."""
        t = PodLabels
        with self._engine.begin() as conn:
            open_uids = (
                conn.execute(select(t.uid).where(t.cluster == self._cluster, t.valid_to.is_(None)))
                .scalars()
                .all()
            )
        for uid in set(open_uids) - present:
            self.close_pod(uid, at)

    # -- reading ----------------------------------------------------------------------------

    def labels_during(
        self, start: datetime, end: datetime
    ) -> tuple[dict[tuple[str, str], dict[str, str]], dict[str, dict[str, str]]]:
        """Pod labels by (namespace, pod) and namespace labels by name, as in force during
        [start, end); where an object changed within the hour, its latest labels."""
        pods: dict[tuple[str, str], tuple[datetime, dict[str, str]]] = {}
        spaces: dict[str, tuple[datetime, dict[str, str]]] = {}
        with self._engine.connect() as conn:
            p = PodLabels
            query = select(p.namespace, p.name, p.valid_from, p.labels).where(
                p.cluster == self._cluster,
                p.valid_from < end,
                or_(p.valid_to.is_(None), p.valid_to > start),
            )
            for row in conn.execute(query):
                _keep_latest(pods, (row.namespace, row.name), row.valid_from, row.labels)
            n = NamespaceLabels
            ns_query = select(n.name, n.valid_from, n.labels).where(
                n.cluster == self._cluster,
                n.valid_from < end,
                or_(n.valid_to.is_(None), n.valid_to > start),
            )
            for ns in conn.execute(ns_query):
                _keep_latest(spaces, ns.name, ns.valid_from, ns.labels)
        return {k: v for k, (_, v) in pods.items()}, {k: v for k, (_, v) in spaces.items()}


def _keep_latest(
    out: dict[Any, tuple[datetime, dict[str, str]]],
    key: Any,
    since: datetime,
    labels: dict[str, str],
) -> None:
    at = _aware(since)
    assert at is not None
    if key not in out or at >= out[key][0]:
        out[key] = (at, dict(labels))
