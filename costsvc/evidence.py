"""What rightsizing and quotas read from Prometheus: per pod and GPU model over a look-back
window, and per namespace and GPU resource. Every figure is aggregated by PromQL at one
instant (the window's end) over a subquery at ``step`` resolution, so 5,000 pods over 7 days
are a dozen instant queries, not millions of samples.

Series (docs/metrics.md): ``gpu_allocation_share`` (who holds which device, and what share of
the physical GPU), ``gpu_container_memory_used_bytes``, and activity — the profiling
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (0-1) where the device's series carry the pod (one holder;
on a MIG instance relative to the instance, so multiplied by its share of the GPU), else
``DCGM_FI_DEV_GPU_UTIL`` / 100, else the per-process ``gpu_container_sm_utilization_ratio``
(shared GPUs). Activity is a share of the whole GPU (what a smaller option must hold); idle
time is judged relative to the unit held.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from costsvc.ingest.prom import PrometheusReader

POD = "namespace, pod, modelName"
UNIT = "namespace, pod, modelName, resource, UUID, GPU_I_ID"
# one series per device unit a pod holds (several containers on one unit count once)
UNITS = f"max by ({UNIT}) (gpu_allocation_share)"
DEVICES = f"count by ({POD}) ({UNITS})"
SHARE = f"sum by ({POD}) ({UNITS})"
MEMORY = f"sum by ({POD}) (gpu_container_memory_used_bytes)"
_INSTANCE = f"{POD}, UUID, GPU_I_ID"
ACTIVITY = {  # per device, as a share of the whole GPU; in order of preference
    "profiling": f'avg by ({POD}) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{{pod!="", GPU_I_ID=""}})',
    # a MIG instance's profiling is relative to the instance: x its share of the GPU
    "profiling (MIG)": (
        f"sum by ({POD}) (max by ({_INSTANCE}) "
        f'(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{pod!="", GPU_I_ID!=""}}) '
        f"* on ({_INSTANCE}) max by ({_INSTANCE}) (gpu_allocation_share)) / {DEVICES}"
    ),
    "utilisation": f'avg by ({POD}) (DCGM_FI_DEV_GPU_UTIL{{pod!="", GPU_I_ID=""}}) / 100',
    "process": f"sum by ({POD}) (gpu_container_sm_utilization_ratio) / {DEVICES}",
}
# a device's share of the GPU: activity / this is activity relative to the unit held (idle is
# judged on that: a 1g slice busy at 30 % is not idle, though 4 % of the GPU)
DEVICE_SHARE = f"({SHARE} / {DEVICES})"
PodKey = tuple[str, str, str]  # namespace, pod, modelName


@dataclass
class PodEvidence:
    device_hours: Decimal = Decimal(0)
    gpu_hours: Decimal = Decimal(0)
    memory_p95: Decimal | None = None  # per device
    memory_peak: Decimal | None = None
    activity_p95: Decimal | None = None
    activity_source: str = ""
    idle_ratio: Decimal | None = None


@dataclass
class FleetFacts:
    memory_bytes: dict[str, int] = field(default_factory=dict)  # per GPU model
    models: set[str] = field(default_factory=set)


def _key(labels: dict[str, str]) -> PodKey:
    return labels.get("namespace", ""), labels.get("pod", ""), labels.get("modelName", "")


class EvidenceReader:
    def __init__(
        self, prom: PrometheusReader, end: datetime, window_s: int, step_s: int = 300
    ) -> None:
        self._prom = prom
        self._end = end
        self._window = window_s
        self._step = step_s

    def _range(self, expr: str) -> str:
        return f"({expr})[{self._window}s:{self._step}s]"

    def _run(self, queries: dict[str, str]) -> dict[str, list[tuple[dict[str, str], Decimal]]]:
        with ThreadPoolExecutor(4) as pool:
            futures = {k: pool.submit(self._prom.vector, q, self._end) for k, q in queries.items()}
            return {k: f.result() for k, f in futures.items()}

    def pods(self, idle_line: Decimal) -> dict[PodKey, PodEvidence]:
        hours = Decimal(self._step) / 3600
        q = {
            "devices": f"sum_over_time({self._range(DEVICES)})",
            "share": f"sum_over_time({self._range(SHARE)})",
            "mem_p95": f"quantile_over_time(0.95, {self._range(f'{MEMORY} / {DEVICES}')})",
            "mem_peak": f"max_over_time({self._range(f'{MEMORY} / {DEVICES}')})",
        }
        for source, expr in ACTIVITY.items():
            q[f"act_{source}"] = f"quantile_over_time(0.95, {self._range(expr)})"
            relative = f"(({expr}) / {DEVICE_SHARE}) < bool {idle_line}"
            q[f"idle_{source}"] = f"avg_over_time({self._range(relative)})"
        answers = self._run(q)
        out: dict[PodKey, PodEvidence] = {}
        for labels, value in answers["devices"]:
            out.setdefault(_key(labels), PodEvidence()).device_hours = value * hours
        for labels, value in answers["share"]:
            if (e := out.get(_key(labels))) is not None:
                e.gpu_hours = value * hours
        for labels, value in answers["mem_p95"]:
            if (e := out.get(_key(labels))) is not None:
                e.memory_p95 = value
        for labels, value in answers["mem_peak"]:
            if (e := out.get(_key(labels))) is not None:
                e.memory_peak = value
        for source in reversed(ACTIVITY):  # the preferred source is written last
            idle = {_key(labels): v for labels, v in answers[f"idle_{source}"]}
            for labels, value in answers[f"act_{source}"]:
                key = _key(labels)
                if (e := out.get(key)) is not None and key in idle:
                    e.activity_p95, e.idle_ratio, e.activity_source = value, idle[key], source
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
            }
        )
        facts = FleetFacts()
        facts.models = {labels.get("modelName", "") for labels, _ in answers["models"]}
        for labels, mib in answers["memory"]:
            facts.memory_bytes[labels.get("modelName", "")] = int(mib) << 20
        facts.models |= set(facts.memory_bytes)
        return facts

    def quota_use(
        self, idle_line: Decimal
    ) -> tuple[dict[tuple[str, str], Decimal], dict[tuple[str, str], Decimal]]:
        """Mean units held, and held while in use, by (namespace, resource) over the window
        (a sample with nothing held counts as 0)."""
        samples = Decimal(self._window) / self._step
        per_ns = "count by (namespace, resource)"
        activity = " or ".join(f"({expr})" for expr in ACTIVITY.values())
        active = f"{UNITS} and on (namespace, pod) ((({activity}) / {DEVICE_SHARE}) > {idle_line})"
        answers = self._run(
            {
                "held": f"sum_over_time({self._range(f'{per_ns} ({UNITS})')})",
                "active": f"sum_over_time({self._range(f'{per_ns} ({active})')})",
            }
        )

        def means(rows: list[tuple[dict[str, str], Decimal]]) -> dict[tuple[str, str], Decimal]:
            return {
                (lab.get("namespace", ""), lab.get("resource", "")): v / samples for lab, v in rows
            }

        return means(answers["held"]), means(answers["active"])

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
