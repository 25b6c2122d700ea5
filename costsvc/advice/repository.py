"""Rightsizing and quota data: pod owners and the owners of ReplicaSets and Jobs (history,
written by costsvc/advice/kube_owners.py), ResourceQuota limits as the API reports them now, and the
latest recommendations and quota usage (written by costsvc/advice/run.py, read by the API, the
command line and /metrics)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, insert, select, update

from costsvc.db.models import (
    ControllerOwner,
    PodOwner,
    QuotaUsage,
    Recommendation,
    ResourceQuotaLimit,
)
from costsvc.db.pod_history import ClusterRows, PodHistory, keep_latest
from costsvc.db.version import bump
from costsvc.labels.history import pods_during

Owner = tuple[str, str]


class OwnerHistory(PodHistory):
    table = PodOwner

    def observe_pod(
        self,
        uid: str,
        namespace: str,
        name: str,
        owner: Owner | None,
        at: datetime,
        since: datetime | None = None,
    ) -> None:
        """The pod's controller is ``owner`` at ``at`` (a new pod: since its creation)."""
        kind, owner_name = owner or ("", "")
        self._observe(
            uid,
            namespace,
            name,
            {"owner_kind": kind, "owner_name": owner_name},
            lambda row: (row.owner_kind, row.owner_name) == (kind, owner_name),
            at,
            since,
        )

    def observe_controller(
        self, namespace: str, kind: str, name: str, owner: Owner | None, at: datetime
    ) -> None:
        """A ReplicaSet's or Job's own controller (None: it has none)."""
        owner_kind, owner_name = owner or ("", "")
        t = ControllerOwner
        key = {"namespace": namespace, "kind": kind, "name": name}
        with self._engine.begin() as conn:
            found = select(t.id, t.owner_kind, t.owner_name).where(*self._match(t, **key))
            row = conn.execute(found).first()
            if row is None:
                self._add(conn, t, **key, owner_kind=owner_kind, owner_name=owner_name, seen_at=at)
            elif (row.owner_kind, row.owner_name) != (owner_kind, owner_name):
                conn.execute(
                    update(t)
                    .where(t.id == row.id)
                    .values(owner_kind=owner_kind, owner_name=owner_name, seen_at=at)
                )

    def owners_during(
        self, start: datetime, end: datetime
    ) -> tuple[dict[tuple[str, str], Owner | None], dict[tuple[str, Owner], Owner | None]]:
        """Each pod's controller by (namespace, pod) during [start, end) (the latest where it
        changed), and the controllers of ReplicaSets and Jobs by (namespace, (kind, name))."""
        pods: dict[tuple[str, str], tuple[datetime, Owner | None]] = {}
        t = PodOwner
        with self._engine.connect() as conn:
            columns = (t.namespace, t.name, t.owner_kind, t.owner_name, t.valid_from)
            for r in pods_during(conn, t, self._cluster, columns, start, end):
                owner = (r.owner_kind, r.owner_name) if r.owner_kind else None
                keep_latest(pods, (r.namespace, r.name), r.valid_from, owner)
            c = ControllerOwner
            parents: dict[tuple[str, Owner], Owner | None] = {}
            for c_row in conn.execute(
                select(c.namespace, c.kind, c.name, c.owner_kind, c.owner_name).where(
                    c.cluster == self._cluster
                )
            ):
                parents[(c_row.namespace, (c_row.kind, c_row.name))] = (
                    (c_row.owner_kind, c_row.owner_name) if c_row.owner_kind else None
                )
        return {k: v for k, (_, v) in pods.items()}, parents


@dataclass(frozen=True, slots=True)
class QuotaLimit:
    namespace: str
    name: str
    resource: str
    hard: str
    used: str | None


class QuotaStore(ClusterRows):
    """ResourceQuota GPU limits as the Kubernetes API reports them now."""

    def replace(
        self, namespace: str, name: str, limits: Mapping[str, tuple[str, str | None]], at: datetime
    ) -> None:
        """The quota ``namespace/name`` now limits ``resource -> (hard, used)`` (empty: the
        quota was deleted or limits no GPU resource)."""
        t = ResourceQuotaLimit
        key = {"namespace": namespace, "name": name}
        with self._engine.begin() as conn:
            conn.execute(delete(t).where(*self._match(t, **key)))
            for resource, (hard, used) in sorted(limits.items()):
                self._add(conn, t, **key, resource=resource, hard=hard, used=used, seen_at=at)

    def keep_only(self, present: set[tuple[str, str]]) -> None:
        """After a (re)list: quotas the API no longer has were deleted."""
        t = ResourceQuotaLimit
        for namespace, name in {(q.namespace, q.name) for q in self.limits()} - present:
            with self._engine.begin() as conn:
                conn.execute(delete(t).where(*self._match(t, namespace=namespace, name=name)))

    def limits(self) -> list[QuotaLimit]:
        t = ResourceQuotaLimit
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(t.namespace, t.name, t.resource, t.hard, t.used)
                .where(t.cluster == self._cluster)
                .order_by(t.namespace, t.name, t.resource)
            ).all()
        return [QuotaLimit(*r) for r in rows]


# -- the latest advice -------------------------------------------------------------------------


def save_advice(
    engine: Engine,
    cluster: str,
    recommendations: Iterable[Mapping[str, Any]],
    quotas: Iterable[Mapping[str, Any]],
) -> None:
    """Replace the cluster's recommendations and quota usage, in one transaction."""
    recs, quota_rows = list(recommendations), list(quotas)
    with engine.begin() as conn:
        conn.execute(delete(Recommendation).where(Recommendation.cluster == cluster))
        conn.execute(delete(QuotaUsage).where(QuotaUsage.cluster == cluster))
        if recs:
            conn.execute(insert(Recommendation), [{**r, "cluster": cluster} for r in recs])
        if quota_rows:
            conn.execute(insert(QuotaUsage), [{**q, "cluster": cluster} for q in quota_rows])
        bump(conn)


_REC_COLUMNS = [c for c in Recommendation.__table__.columns if c.name != "id"]
_QUOTA_COLUMNS = [c for c in QuotaUsage.__table__.columns if c.name != "id"]


def recommendations(
    engine: Engine,
    filters: Mapping[str, list[str]] | None = None,
    actions: Iterable[str] | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """The latest recommendations, biggest saving first; ``filters``: column -> values (team,
    namespace, workload, cluster, gpu_model); ``actions``: only these actions."""
    t = Recommendation
    query = select(*_REC_COLUMNS)
    for column, values in (filters or {}).items():
        query = query.where(t.__table__.c[column].in_(values))
    if actions is not None:
        query = query.where(t.action.in_(list(actions)))
    query = query.order_by(
        t.saving_monthly.desc(), t.team, t.namespace, t.workload_kind, t.workload, t.gpu_model
    )
    if limit is not None:
        query = query.limit(limit)
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]


def quota_usage(
    engine: Engine, filters: Mapping[str, list[str]] | None = None
) -> list[dict[str, Any]]:
    t = QuotaUsage
    query = select(*_QUOTA_COLUMNS)
    for column, values in (filters or {}).items():
        query = query.where(t.__table__.c[column].in_(values))
    query = query.order_by(t.team, t.namespace, t.resource, t.cluster)
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]
