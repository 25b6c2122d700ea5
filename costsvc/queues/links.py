"""Each Kueue LocalQueue's ClusterQueue over time, kept as history (``local_queue_links``,
costsvc/db/queue_links.py): one row per LocalQueue and ClusterQueue, valid
[valid_from, valid_to), open while ``valid_to`` is NULL. The watcher
(costsvc/queues/kube_watch.py) writes it; the ingest asks :meth:`LocalQueueHistory.links_during`
for an hour's links (docs/queues.md, "The queue of a pod").

A LocalQueue's ``spec.clusterQueue`` is immutable (kubernetes-sigs/kueue
``apis/kueue/v1beta2/localqueue_types.go``: ``self == oldSelf``): a LocalQueue points to
another ClusterQueue by being deleted and created again under its name, which closes its row
and opens one; a LocalQueue never seen before dates from its creation. Which rows are in force
over a span is the label history's rule (costsvc/labels/history.py ``in_force_during``); where
a LocalQueue was re-pointed within the hour, its latest ClusterQueue (as for labels).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update

from costsvc.db.pod_history import ClusterRows, keep_latest, next_period
from costsvc.db.queue_links import LocalQueueLinks
from costsvc.labels.history import in_force_during

LocalQueueKey = tuple[str, str]  # namespace, LocalQueue


class LocalQueueHistory(ClusterRows):
    """One cluster's LocalQueue -> ClusterQueue links over time."""

    def observe(
        self,
        namespace: str,
        name: str,
        cluster_queue: str,
        at: datetime,
        since: datetime | None = None,
    ) -> None:
        """The LocalQueue points to ``cluster_queue`` at ``at`` (one never seen: ``since`` its
        creation); nothing is written when its open row says so already."""
        t = LocalQueueLinks
        with self._engine.begin() as conn:
            key = self._match(t, namespace=namespace, name=name)
            same = lambda row: row.cluster_queue == cluster_queue  # noqa: E731
            start = next_period(conn, t, key, same, at, since)
            if start is not None:
                self._add(
                    conn,
                    t,
                    namespace=namespace,
                    name=name,
                    cluster_queue=cluster_queue,
                    valid_from=start,
                )

    def close(self, namespace: str, name: str, at: datetime) -> None:
        """The LocalQueue was deleted at ``at``."""
        t = LocalQueueLinks
        with self._engine.begin() as conn:
            match = self._match(t, namespace=namespace, name=name)
            conn.execute(update(t).where(*match, t.valid_to.is_(None)).values(valid_to=at))

    def close_missing(self, present: set[LocalQueueKey], at: datetime) -> None:
        """After a (re)list: LocalQueues we had open that the API no longer has were deleted."""
        t = LocalQueueLinks
        with self._engine.connect() as conn:
            query = select(t.namespace, t.name).where(*self._match(t), t.valid_to.is_(None))
            open_now = {(r.namespace, r.name) for r in conn.execute(query)}
        for namespace, name in sorted(open_now - present):
            self.close(namespace, name, at)

    def links_during(self, start: datetime, end: datetime) -> dict[LocalQueueKey, str]:
        """Each LocalQueue's ClusterQueue in force during [start, end) (re-pointed within it:
        the latest)."""
        t = LocalQueueLinks
        found: dict[LocalQueueKey, tuple[datetime, str]] = {}
        query = select(t.namespace, t.name, t.valid_from, t.cluster_queue).where(
            *self._match(t), in_force_during(t, start, end)
        )
        with self._engine.connect() as conn:
            for r in conn.execute(query):
                keep_latest(found, (r.namespace, r.name), r.valid_from, r.cluster_queue)
        return {k: v for k, (_, v) in found.items()}
