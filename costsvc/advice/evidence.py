"""What rightsizing and quotas read from Prometheus: per pod and GPU model over a look-back
window, and per namespace and GPU resource, each figure one instant query at the window's
end. The range functions run on the raw series (a quantile of a container's memory samples, a
count of 30-minute points a unit was held, the share of points a GPU was idle), and only then
are the answers summed per pod: a subquery over an aggregation would aggregate every series
again at each of the points of a week, which does not scale to thousands of pods.

Series (docs/metrics.md): ``gpu_allocation_share`` (who holds which device, and what share of
the physical GPU), ``gpu_container_memory_used_bytes``, and activity — the profiling
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (0-1) where the device's series carry the pod (one holder;
on a MIG instance relative to the instance, so multiplied by its share of the GPU), else
``DCGM_FI_DEV_GPU_UTIL`` / 100, else the per-process ``gpu_container_sm_utilization_ratio``
(shared GPUs). Activity is a share of the whole GPU (what a smaller option must hold); idle
time is judged relative to the unit held. A pod's memory is the sum of its containers' p95s
(and peaks): an upper bound when several containers share a device. Per GPU model, the MIG
geometry our exporters published (``gpu_compute_slices``/``gpu_memory_slices`` on
``gpu_mig_instance_info``), which rightsizing's MIG shares are of (costsvc/rules/mig.py).

**Held time, counted exactly** (:meth:`EvidenceReader.pods`): the window's points are the
multiples of the step in (end - window, end], ``window / step`` of them — 336 in a week of
half hours, so a unit held all week is 168 h, never 168.5. The reads are evaluated at the end
floored to the step, over a subquery range half a step short of the window: its left end then
lies between two points, so Prometheus 2.x (closed ranges, ``[t - r, t]``) and 3.x (left-open
ranges since 3.0, ``(t - r, t]``) count the same points. A unit counts as held at a point when
it has a sample in the :data:`HELD_LOOKBACK` before it (``last_over_time``): a range function
ignores staleness markers, so a series that ended counts the same whether it was scraped live
(a staleness marker follows its last sample: an instant lookup stops there) or back-filled
(none: an instant lookup goes on seeing it for the look-back). Either way a job's end counts
for the look-back after its last sample — at most one point, and only when a point falls in
those five minutes; the ingest's billing integrates the samples themselves and has no such
tail.
"""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from costsvc.ingest.prom import PrometheusReader
from costsvc.kit.times import truncate
from costsvc.rules.mig import Geometry

POD = "namespace, pod, modelName"
UNIT = "namespace, pod, modelName, resource, UUID, GPU_I_ID"
_INSTANCE = f"{POD}, UUID, GPU_I_ID"
# activity sources, in order of preference: (series selector, scale to a 0-1 ratio)
PROFILING = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!="", GPU_I_ID=""}'
MIG_PROFILING = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!="", GPU_I_ID!=""}'
UTILISATION = 'DCGM_FI_DEV_GPU_UTIL{pod!="", GPU_I_ID=""}'
PROCESS = "gpu_container_sm_utilization_ratio"
SOURCES = ("profiling", "profiling (MIG)", "utilisation", "process")
PodKey = tuple[str, str, str]  # namespace, pod, modelName
GEOMETRY = "gpu_compute_slices, gpu_memory_slices"  # a MIG GPU's, on gpu_mig_instance_info
# a unit is held at a point when it has a sample this long before it: Prometheus' look-back
# (five minutes, the longest scrape interval an instant lookup bridges) and a second, so that
# a sample exactly five minutes before the point counts on 2.x (closed) and 3.x (left-open)
# range semantics alike
HELD_LOOKBACK = 301


@dataclass
class PodEvidence:
    device_hours: Decimal = Decimal(0)
    gpu_hours: Decimal = Decimal(0)
    devices: Decimal = Decimal(1)  # units it held in the window
    memory_p95: Decimal | None = None  # per device
    memory_peak: Decimal | None = None
    activity_p95: Decimal | None = None
    activity_source: str = ""
    idle_ratio: Decimal | None = None
    held_by_resource: dict[str, Decimal] = field(default_factory=dict)  # unit-points


@dataclass
class FleetFacts:
    memory_bytes: dict[str, int] = field(default_factory=dict)  # per GPU model
    models: set[str] = field(default_factory=set)
    # per GPU model: the MIG geometry our exporters read from its GPUs and published
    mig_geometry: dict[str, Geometry] = field(default_factory=dict)


def _key(labels: dict[str, str]) -> PodKey:
    return labels.get("namespace", ""), labels.get("pod", ""), labels.get("modelName", "")


def _unit(labels: dict[str, str]) -> tuple[str, ...]:
    return tuple(labels.get(k, "") for k in UNIT.split(", "))


class EvidenceReader:
    def __init__(
        self, prom: PrometheusReader, end: datetime, window_s: int, step_s: int = 1800
    ) -> None:
        self._prom = prom
        # the points of the window: multiples of the step in (end - window, end]
        self._end = truncate(end, timedelta(seconds=step_s))
        self._window = window_s
        self._step = step_s

    def _run(self, queries: dict[str, str]) -> dict[str, list[tuple[dict[str, str], Decimal]]]:
        with ThreadPoolExecutor(2) as pool:  # Prometheus runs each query on its cores
            futures = {k: pool.submit(self._prom.vector, q, self._end) for k, q in queries.items()}
            return {k: f.result() for k, f in futures.items()}

    @property
    def points(self) -> str:
        """The subquery range and step of the window's points: ``window / step`` points on
        Prometheus 2.x and 3.x alike (the range's left end is half a step off every point)."""
        return f"[{self._window * 1000 - self._step * 500}ms:{self._step}s]"

    def held_query(self) -> str:
        """Per unit: the points of the window it was held (the one subquery of the whole
        selector)."""
        held = f"last_over_time(gpu_allocation_share[{HELD_LOOKBACK}s])"
        return f"max by ({UNIT}) (count_over_time({held}{self.points}))"

    @property
    def end(self) -> datetime:
        """When the reads are evaluated: the end floored to the step."""
        return self._end

    def pods(self, idle_line: Decimal) -> dict[PodKey, PodEvidence]:
        w, sub = f"[{self._window}s]", self.points
        line = f"{idle_line}"
        last_share = f"max by ({_INSTANCE}) (last_over_time(gpu_allocation_share{w}))"
        q = {
            # per unit: the points it was held, and its mean share of the GPU (raw samples)
            "held": self.held_query(),
            "share": f"max by ({UNIT}) (avg_over_time(gpu_allocation_share{w}))",
            "mem_p95": f"sum by ({POD}) "
            f"(quantile_over_time(0.95, gpu_container_memory_used_bytes{w}))",
            "mem_peak": f"sum by ({POD}) (max_over_time(gpu_container_memory_used_bytes{w}))",
            "act_profiling": f"max by ({POD}) (quantile_over_time(0.95, {PROFILING}{w}))",
            "idle_profiling": f"avg by ({POD}) (avg_over_time(({PROFILING} < bool {line}){sub}))",
            "act_profiling (MIG)": f"max by ({POD}) (quantile_over_time(0.95, {MIG_PROFILING}{w})"
            f" * on ({_INSTANCE}) group_left () {last_share})",
            "idle_profiling (MIG)": f"avg by ({POD}) "
            f"(avg_over_time(({MIG_PROFILING} < bool {line}){sub}))",
            "act_utilisation": f"max by ({POD}) (quantile_over_time(0.95, {UTILISATION}{w})) / 100",
            "idle_utilisation": f"avg by ({POD}) "
            f"(avg_over_time(({UTILISATION} < bool {idle_line * 100}){sub}))",
            "act_process": f"sum by ({POD}) (quantile_over_time(0.95, {PROCESS}{w}))",
            # relative to the unit held: SM time / the container's share of the GPU
            "idle_process": f"avg by ({POD}) (avg_over_time(({PROCESS} / on (UUID, GPU_I_ID, "
            "namespace, pod, container) group_left () gpu_allocation_share "
            f"< bool {line}){sub}))",
        }
        answers = self._run(q)
        hours = Decimal(self._step) / 3600
        out: dict[PodKey, PodEvidence] = {}
        shares = {_unit(labels): v for labels, v in answers["share"]}
        units: dict[PodKey, int] = defaultdict(int)
        for labels, points in answers["held"]:
            key = _key(labels)
            pod = out.setdefault(key, PodEvidence())
            resource = labels.get("resource", "")
            pod.held_by_resource[resource] = pod.held_by_resource.get(resource, Decimal(0)) + points
            pod.device_hours += points * hours
            pod.gpu_hours += points * hours * shares.get(_unit(labels), Decimal(0))
            units[key] += 1
        for key, n in units.items():
            out[key].devices = Decimal(n)
        for labels, value in answers["mem_p95"]:
            if (e := out.get(_key(labels))) is not None:
                e.memory_p95 = value / e.devices
        for labels, value in answers["mem_peak"]:
            if (e := out.get(_key(labels))) is not None:
                e.memory_peak = value / e.devices
        for source in reversed(SOURCES):  # the preferred source is written last
            idle = {_key(labels): v for labels, v in answers[f"idle_{source}"]}
            for labels, value in answers[f"act_{source}"]:
                key = _key(labels)
                if (e := out.get(key)) is not None and key in idle:
                    per_device = value / e.devices if source == "process" else value
                    e.activity_p95, e.idle_ratio = per_device, idle[key]
                    e.activity_source = source
        return out

    def fleet(self) -> FleetFacts:
        at = f"{self._window}s"
        answers = self._run(
            {
                "models": f"count by (modelName) (last_over_time(gpu_device_up[{at}]))",
                "memory": (
                    "max by (modelName) (last_over_time(DCGM_FI_DEV_FB_USED"
                    f'{{GPU_I_ID=""}}[{at}]) + last_over_time(DCGM_FI_DEV_FB_FREE'
                    f'{{GPU_I_ID=""}}[{at}]))'
                ),
                "geometry": f"count by (modelName, {GEOMETRY}) (last_over_time("
                f'gpu_mig_instance_info{{gpu_compute_slices!="", gpu_memory_slices!=""}}[{at}]))',
            }
        )
        facts = FleetFacts()
        facts.models = {labels.get("modelName", "") for labels, _ in answers["models"]}
        for labels, mib in answers["memory"]:
            facts.memory_bytes[labels.get("modelName", "")] = int(mib) << 20
        facts.models |= set(facts.memory_bytes)
        for labels, _ in sorted(answers["geometry"], key=lambda a: sorted(a[0].items())):
            compute, memory = (labels.get(k, "") for k in GEOMETRY.split(", "))
            if compute.isdigit() and memory.isdigit() and int(compute) and int(memory):
                facts.mig_geometry[labels.get("modelName", "")] = Geometry(
                    int(compute), int(memory)
                )
        return facts

    def quota_use(
        self, pods: dict[PodKey, PodEvidence]
    ) -> tuple[dict[tuple[str, str], Decimal], dict[tuple[str, str], Decimal]]:
        """Mean units held, and held while in use, by (namespace, resource) over the window
        (a point with nothing held counts as 0), from the pods' evidence: in use = held x the
        pod's share of time not idle; a pod without activity series counts as not in use."""
        points = Decimal(self._window) / self._step
        held: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
        active: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
        for (namespace, _, _), e in pods.items():
            for resource, n in e.held_by_resource.items():
                held[(namespace, resource)] += n / points
                if e.idle_ratio is not None:
                    active[(namespace, resource)] += n * (1 - e.idle_ratio) / points
        return dict(held), dict(active)

    def unit_shares(self) -> dict[str, list[tuple[str, Decimal, Decimal]]]:
        """Per resource: (GPU model, units seen, mean share of a GPU per unit) over the
        window."""
        at = f"{self._window}s"
        units = f"max by ({UNIT}) (last_over_time(gpu_allocation_share[{at}]))"
        answers = self._run(
            {
                "count": f"count by (resource, modelName) ({units})",
                "avg": f"avg by (resource, modelName) ({units})",
            }
        )
        avg = {(lab.get("resource", ""), lab.get("modelName", "")): v for lab, v in answers["avg"]}
        out: dict[str, list[tuple[str, Decimal, Decimal]]] = {}
        for lab, n in answers["count"]:
            key = (lab.get("resource", ""), lab.get("modelName", ""))
            out.setdefault(key[0], []).append((key[1], n, avg.get(key, Decimal(0))))
        return out

    def ksm_quotas(self) -> list[tuple[str, str, str, str | None]]:
        """kube-state-metrics' ``kube_resourcequota{namespace, resourcequota, resource,
        type="hard"|"used"}`` at the window's end (the last hour): (namespace, resource,
        hard, used), GPU resources only."""
        answers = self._run(
            {"q": 'last_over_time(kube_resourcequota{resource=~".*nvidia.com/.*"}[1h])'}
        )
        found: dict[tuple[str, str, str], dict[str, Decimal]] = {}
        for lab, v in answers["q"]:
            key = (lab.get("namespace", ""), lab.get("resourcequota", ""), lab.get("resource", ""))
            found.setdefault(key, {})[lab.get("type", "")] = v
        return [
            (ns, resource, str(vals["hard"]), str(vals["used"]) if "used" in vals else None)
            for (ns, _, resource), vals in sorted(found.items())
            if "hard" in vals
        ]

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        rows = self._prom.latest("kube_namespace_labels", self._end, self._window)
        return {r.get("namespace", ""): r for r in rows}

    def pod_labels(self) -> dict[tuple[str, str], dict[str, str]]:
        rows = self._prom.latest("kube_pod_labels", self._end, self._window)
        return {(r.get("namespace", ""), r.get("pod", "")): r for r in rows}
