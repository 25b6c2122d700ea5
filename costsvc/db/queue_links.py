"""The history of each Kueue LocalQueue's ClusterQueue (``local_queue_links``): one row per
LocalQueue and ClusterQueue it points to, valid [valid_from, valid_to), open while valid_to
is NULL (costsvc/queues/links.py writes and reads it; docs/queues.md)."""

from __future__ import annotations

from sqlalchemy import Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from costsvc.db.columns import Base, Valid


class LocalQueueLinks(Valid, Base):
    """A LocalQueue (``namespace``/``name`` in ``cluster``) and the ClusterQueue its
    ``spec.clusterQueue`` named over [valid_from, valid_to)."""

    __tablename__ = "local_queue_links"
    __table_args__ = (
        UniqueConstraint("cluster", "namespace", "name", "valid_from"),
        Index("ix_local_queue_links_open", "cluster", "valid_to"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    cluster: Mapped[str] = mapped_column(String(253))
    namespace: Mapped[str] = mapped_column(String(253))
    name: Mapped[str] = mapped_column(String(253))
    cluster_queue: Mapped[str] = mapped_column(String(253))
