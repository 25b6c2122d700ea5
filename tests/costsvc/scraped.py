"""A synthetic OpenMetrics history in the form Prometheus stores scraped data: every series
carries its target's ``job`` and ``instance`` labels, and each target has an ``up`` series
with a sample at every scrape of it — 1 where the target answered (the timestamps its series
have), 0 at the scrapes in between that failed (Prometheus records a failed scrape as
``up`` 0 and no other sample: prometheus.io/docs/concepts/jobs_instances/).

Targets: a series with a ``Hostname``/``hostname`` label comes from that node's GPU exporter
(``gpu-exporter``, ``<node>:9400``), the ``kube_*`` series from kube-state-metrics, anything
else from one ``other`` target; a ``cluster`` label (an external label) goes on the target's
``up`` too. The money of the histories does not move: no code bills ``up``, ``job`` or
``instance``."""

from __future__ import annotations

import re
from collections import Counter
from itertools import pairwise

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+) (\S+)$")
_HOST = re.compile(r'(?:^|,)(?:Hostname|hostname)="((?:[^"\\]|\\.)*)"')
_CLUSTER = re.compile(r'(?:^|,)cluster="((?:[^"\\]|\\.)*)"')


def _target(name: str, labels: str) -> tuple[str, str, str | None]:
    cluster = _CLUSTER.search(labels)
    where = cluster.group(1) if cluster else None
    if name.startswith("kube_"):
        return ("kube-state-metrics", "kube-state-metrics:8080", where)
    host = _HOST.search(labels)
    if host:
        return ("gpu-exporter", f"{host.group(1)}:9400", where)
    return ("other", "other:9100", where)


def as_scraped(text: str) -> str:
    """``text`` (OpenMetrics, one sample a line, ``# EOF`` last) with job/instance labels
    and the targets' ``up`` series."""
    out: list[str] = []
    seen: dict[tuple[str, str, str | None], set[int]] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None:
            if line != "# EOF":
                out.append(line)
            continue
        name, labels, value, stamp = m.groups()
        target = _target(name, labels)
        seen.setdefault(target, set()).add(int(float(stamp)))
        extra = f'job="{target[0]}",instance="{target[1]}"'
        out.append(f"{name}{{{labels},{extra}}} {value} {stamp}")
    out.append("# TYPE up gauge")
    for (job, instance, cluster), stamps in sorted(seen.items(), key=str):
        times = sorted(stamps)
        steps = Counter(b - a for a, b in pairwise(times))
        step = steps.most_common(1)[0][0] if steps else 0
        scrapes = dict.fromkeys(times, 1)
        for a, b in pairwise(times):
            if step and b - a <= 3600:  # failed scrapes; a longer silence: no target then
                scrapes.update({t: 0 for t in range(a + step, b, step)})
        where = f',cluster="{cluster}"' if cluster is not None else ""
        for t in sorted(scrapes):
            out.append(f'up{{job="{job}",instance="{instance}"{where}}} {scrapes[t]} {t}')
    out.append("# EOF")
    return "\n".join(out) + "\n"


class Families:
    """A history written already in the scraped form (the test gives every series its
    ``job``/``instance`` and writes each target's ``up``), family by family."""

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {}

    def add(self, name: str, labels: str, value: object, t: float) -> None:
        self.lines.setdefault(name, []).append(f"{name}{{{labels}}} {value} {t:.3f}")

    def text(self, counters: frozenset[str] = frozenset(), gauges_only: bool = False) -> str:
        """OpenMetrics: each family's ``# TYPE`` (``counter`` for those named, else
        ``gauge``) and its samples, ``# EOF`` last; ``gauges_only``: without the counters (as
        an exporter before its integrals publishes the same history)."""
        out = []
        for name, found in self.lines.items():
            if gauges_only and name in counters:
                continue
            out.append(f"# TYPE {name} {'counter' if name in counters else 'gauge'}")
            out.extend(found)
        return "\n".join([*out, "# EOF"]) + "\n"


def exporter_gpu(uuid: str, node: str, model: str, extra: str = "") -> str:
    """The labels of a GPU's series as node ``node``'s exporter target publishes them."""
    return (
        f'UUID="{uuid}",modelName="{model}",Hostname="{node}",gpu="0",'
        f'job="gpu-exporter",instance="{node}:9400"{extra}'
    )
