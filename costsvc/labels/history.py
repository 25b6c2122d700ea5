"""Pod and namespace labels kept as history: one row per distinct label set with its validity
[valid_from, valid_to). A relabelled pod closes its old row and opens a new one, a deleted pod
closes its row — so a pod deleted yesterday is still charged to the team it had. Ingestion
asks :meth:`LabelHistory.labels_during` for the labels in force during an hour; the Kubernetes
watcher (costsvc/labels/kube_watch.py) writes them. The pods' history is a
:class:`~costsvc.db.pod_history.PodHistory`, as the pod owners' is.

The one rule of a history over a span (:func:`in_force_during`; :func:`was_in_force_during`
for a row already read): a row is in force during [start, end) when it began before ``end``
and had not ended by ``start`` (open while ``valid_to`` is NULL). Used by the label and owner
histories (:func:`pods_during`: costsvc/advice/repository.py ``OwnerHistory``) and
``/allocation``'s label history (costsvc/opencost/queries.py ``label_history``,
costsvc/opencost/podlabels.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, and_, func, insert, or_, select, update

from costsvc.db.models import NamespaceLabels, PodLabels
from costsvc.db.pod_history import PodHistory, keep_latest
from costsvc.kit.times import as_utc


def in_force_during(t: Any, start: datetime, end: datetime) -> ColumnElement[bool]:
    """The rule, in SQL: the rows of the history table ``t`` (``valid_from``, ``valid_to``)
    in force at some time in [start, end)."""
    return and_(t.valid_from < end, or_(t.valid_to.is_(None), t.valid_to > start))


def was_in_force_during(
    valid_from: datetime, valid_to: datetime | None, start: datetime, end: datetime
) -> bool:
    """The rule for a row already read: whether [valid_from, valid_to) meets [start, end)."""
    return valid_from < end and (valid_to is None or valid_to > start)


def pods_during(
    conn: Connection,
    t: Any,
    cluster: str,
    columns: Sequence[Any],
    start: datetime,
    end: datetime,
) -> Sequence[Row[Any]]:
    """``columns`` of the rows of the pod history ``t`` of ``cluster`` in force during
    [start, end)."""
    query = select(*columns).where(t.cluster == cluster, in_force_during(t, start, end))
    return conn.execute(query).all()


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return as_utc(value)


class LabelHistory(PodHistory):
    table = PodLabels

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
        self._observe(
            uid,
            namespace,
            name,
            {"labels": labels},
            lambda row: (row.labels, row.namespace, row.name) == (labels, namespace, name),
            at,
            since,
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
            columns = (p.namespace, p.name, p.valid_from, p.labels)
            for row in pods_during(conn, p, self._cluster, columns, start, end):
                keep_latest(pods, (row.namespace, row.name), row.valid_from, dict(row.labels))
            n = NamespaceLabels
            ns_query = select(n.name, n.valid_from, n.labels).where(
                n.cluster == self._cluster, in_force_during(n, start, end)
            )
            for ns in conn.execute(ns_query):
                keep_latest(spaces, ns.name, ns.valid_from, dict(ns.labels))
        return {k: v for k, (_, v) in pods.items()}, {k: v for k, (_, v) in spaces.items()}
