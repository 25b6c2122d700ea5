"""The previous calendar month (UTC), complete, so that the finance page has a month to close:
the same simulated nodes (demo/history.py: each exporter built by exporter/build.py), the
same kube-state-metrics and served models, recorded into the same Prometheus as the demo's
recent hours, and ingested by the cost service's own ingest — the product's path, every hour
of the month.

Only coarser: a month scraped every 60 s would be ~16 M samples and minutes of simulation. So
here Prometheus scrapes every :data:`STEP` s and each exporter collects as often (``gpu-exporter
--collect-interval 1h``, a configuration a real node could run). The cost service reads the
hours from the exporter's integrals (docs/cost-model.md, "The hour read from the exporter's
integrals": an hour is what each counter grew between the last scrapes before its edges, so
one scrape an hour is enough), at that collection resolution: the share-seconds of holdings
that last the month are exact, utilisation is a reading an hour. The month's series are the
live targets' (same ``job`` and ``instance``); they stop at the month's end (or where the
recent hours' history begins, when the demo starts within ``--hours`` of the month's end), so
the two histories never overlap. The demo's incidents are not in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from demo import cluster, vllm
from demo.history import NODES, NodeHistories, record, record_targets, spec_with_epoch, stamps
from demo.history import target_labels as node_target_labels
from exporter.simulate.spec import load as load_spec

STEP = 3600  # seconds between the month's scrapes, and between its exporters' collections
MAX_BLOCK = "744h"  # promtool reads its input once per block: the month in one or two


def previous_month(now: datetime) -> tuple[datetime, datetime]:
    """[start, end) of the calendar month (UTC) before ``now``'s."""
    end = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (end - timedelta(days=1)).replace(day=1), end


@dataclass
class Made:
    month: str  # YYYY-MM
    start: datetime
    end: datetime  # the end of its last hour recorded (the month's, or the recent history's start)
    month_end: datetime
    folders: list[Path]  # TSDB blocks' folders
    samples: int

    @property
    def hours(self) -> int:
        """The month's hours (those after :attr:`end` are the recent hours' history)."""
        return int((self.month_end - self.start) / timedelta(hours=1))


class PastMonth:
    """The previous month's history, recorded by one forked process per node (started at once,
    before the demo starts any thread) and :meth:`results` in the main process."""

    def __init__(
        self, workdir: Path, now: datetime, recent: datetime, exporter_ports: list[int]
    ) -> None:
        self.start, self.month_end = previous_month(now)
        self.month = f"{self.start:%Y-%m}"
        self.end = min(self.month_end, recent)  # never over the recent hours' history
        self.first = self.start - timedelta(seconds=STEP)  # a scrape before its first hour
        self.epoch = self.first - timedelta(seconds=STEP)  # every pod running by then
        self.dir = workdir / "month"
        self.dir.mkdir()
        self.specs = [
            spec_with_epoch(name, self.epoch, self.dir, None, "month")[0] for name in NODES
        ]
        self.histories = NodeHistories(
            self.specs,
            [node_target_labels("gpu-exporter", p) for p in exporter_ports],
            self.dir,
            self.first,
            STEP,
            collect=STEP,
            max_block=MAX_BLOCK,
        )
        self.histories.record(self.end)  # its end is known: the nodes start on it now

    def stop(self) -> None:
        self.histories.stop()

    def results(self, labels_port: int, vllm_port: int) -> Made:
        """The nodes' blocks, and kube-state-metrics' and the served models' recorded here."""
        fleets = [load_spec(p) for p in self.specs]
        t0 = self.epoch.timestamp()
        times = stamps(self.first, self.end, STEP)
        made = [
            record(
                self.dir / "kube-state-metrics",
                times,
                node_target_labels("kube-state-metrics", labels_port),
                lambda stamp: cluster.scrape(fleets, stamp - t0),
                MAX_BLOCK,
            ),
            record_targets(
                self.dir / "vllm",
                times,
                lambda stamp: vllm.scrapes(fleets, stamp - t0, vllm_port),
                MAX_BLOCK,
            ),
        ]
        made += self.histories.results()
        return Made(
            self.month,
            self.start,
            self.end,
            self.month_end,
            [folder for folder, _ in made],
            sum(n for _, n in made),
        )
