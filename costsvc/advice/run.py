"""Compute rightsizing recommendations and quota usage for the look-back window ending now, and
store them (costsvc/advice/repository.py): Prometheus (costsvc/advice/evidence.py), pod labels and
owners from their history, the cost model in force at the window's end, then the pure rules
(costsvc/advice/rightsizing.py, costsvc/advice/quotas.py). Run by ``gpu-costsvc recommend``
and by ``serve`` after each hourly ingest; the API, /metrics and the command read what it
stored."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine

from costsvc.advice.evidence import EvidenceReader, PodEvidence
from costsvc.advice.quotas import figures
from costsvc.advice.repository import OwnerHistory, QuotaStore, save_advice
from costsvc.advice.rightsizing import Evidence, Fleet, Rules, Serving, advise, advise_serving
from costsvc.inference.repository import serving_hours
from costsvc.ingest.prom import PrometheusReader
from costsvc.labels.history import LabelHistory
from costsvc.rules.chargeback import UNALLOCATED
from costsvc.rules.cost_model import CostModel, LabelKeys
from costsvc.rules.mig import mig_table
from costsvc.rules.owners import resolve_label, resolve_owner, sanitised_keys
from costsvc.rules.workloads import Workload, workload_from_name, workload_of
from kube.label_names import ksm_labels, sanitize_label

PPM = Decimal(1_000_000)


@dataclass(frozen=True)
class Options:
    window: timedelta = timedelta(days=7)
    step_s: int = 1800  # points 30 minutes apart: 336 a week (bench: the same advice as 15 min)
    rules: Rules = field(default_factory=Rules)


@dataclass
class AdviceRun:
    """What a run computed: the recommendations and the quota figures it stores."""

    recommendations: list[dict[str, Any]]
    quotas: list[dict[str, Any]]


def _ppm(value: Decimal | None) -> int | None:
    return None if value is None else int((value * PPM).to_integral_value())


class _Teams:
    """The team of a pod or a namespace from its labels (history first, else
    kube-state-metrics), as the chargeback resolves it."""

    def __init__(
        self,
        keys: LabelKeys,
        pods: dict[tuple[str, str], dict[str, str]],
        spaces: dict[str, dict[str, str]],
    ) -> None:
        self._keys = sanitised_keys(keys)
        self._pods, self._spaces = pods, spaces

    def pod(self, namespace: str, pod: str) -> str:
        labels = self._pods.get((namespace, pod), {})
        return resolve_owner(labels, self._spaces.get(namespace, {}), self._keys).team

    def namespace(self, namespace: str) -> str:
        return resolve_label({}, self._spaces.get(namespace, {}), self._keys.team, UNALLOCATED)


def _sanitised(labels: dict[str, str]) -> dict[str, str]:
    return {sanitize_label(k): v for k, v in labels.items()}


def compute(
    engine: Engine,
    prom: PrometheusReader,
    model: CostModel,
    cluster: str,
    end: datetime,
    options: Options | None = None,
) -> AdviceRun:
    opts = options or Options()
    rules = opts.rules
    start = end - opts.window
    window_s = int(opts.window.total_seconds())
    reader = EvidenceReader(prom, end, window_s, opts.step_s)
    pods = reader.pods(rules.idle_activity)
    fleet_facts = reader.fleet()

    # labels: Kubernetes-API history wins over kube-state-metrics (sanitised keys, as ingest)
    ksm_pods = {k: ksm_labels(v) for k, v in reader.pod_labels().items()}
    ksm_spaces = {k: ksm_labels(v) for k, v in reader.namespace_labels().items()}
    hist_pods, hist_spaces = LabelHistory(engine, cluster).labels_during(start, end)
    pod_labels = {**ksm_pods, **{k: _sanitised(v) for k, v in hist_pods.items()}}
    spaces = {**ksm_spaces, **{k: _sanitised(v) for k, v in hist_spaces.items()}}
    teams = _Teams(model.labels, pod_labels, spaces)
    owners, parents = OwnerHistory(engine, cluster).owners_during(start, end)

    version = model.version_at(end)
    prices: dict[str, int] = {}
    for name in sorted(fleet_facts.models | {k[2] for k in pods}):
        price = model.price_at(end, name) if version is not None else None
        if price is not None:
            prices[name] = price.micro_per_hour()
    fleet = Fleet(prices, fleet_facts.memory_bytes, model.policies.mig_share_basis)

    # pods -> workloads
    by_namespace: dict[str, dict[tuple[str, str], tuple[str, str] | None]] = defaultdict(dict)
    for (ns, controller), parent in parents.items():
        by_namespace[ns][controller] = parent
    window_hours = Decimal(window_s) / 3600
    # served models first: their pods are sized by the tokens they serve, not again below
    recs, sized = _serving(engine, cluster, (start, end), pods, fleet, rules, model.currency)
    groups: dict[tuple[str, Workload, str], list[tuple[str, PodEvidence]]] = defaultdict(list)
    for (namespace, pod, gpu_model), ev in pods.items():
        if (namespace, pod) in sized:
            continue
        raw = hist_pods.get((namespace, pod)) or _unsanitised_hash(pod_labels.get((namespace, pod)))
        if (namespace, pod) in owners:
            wl = workload_of(pod, owners[(namespace, pod)], by_namespace[namespace], raw)
        else:
            wl = workload_from_name(pod, raw)
        groups[(namespace, wl, gpu_model)].append((pod, ev))

    for (namespace, wl, gpu_model), members in sorted(groups.items()):
        evidence = _combine(gpu_model, [e for _, e in members])
        advice = advise(evidence, fleet, rules, window_hours)
        by_team: dict[str, Decimal] = defaultdict(Decimal)
        for pod, e in members:
            by_team[teams.pod(namespace, pod)] += e.device_hours
        team = min(by_team, key=lambda t: (-by_team[t], t)) if by_team else UNALLOCATED
        recs.append(
            {
                "computed_at": end,
                "window_start": start,
                "window_end": end,
                "team": team,
                "namespace": namespace,
                "workload_kind": wl.kind,
                "workload": wl.name,
                "gpu_model": gpu_model,
                "pods": len(members),
                "action": advice.action,
                "target": advice.target,
                "reason": advice.reason[:500],
                "device_hours": int(evidence.device_hours * PPM),
                "gpu_hours": int(evidence.gpu_hours * PPM),
                "memory_p95_bytes": evidence.memory_p95_bytes,
                "memory_peak_bytes": evidence.memory_peak_bytes,
                "activity_p95_ppm": _ppm(evidence.activity_p95),
                "activity_source": evidence.activity_source,
                "idle_ppm": _ppm(evidence.idle_ratio),
                "current_share_ppm": _ppm(advice.current_share) or 0,
                "target_share_ppm": _ppm(advice.target_share) or 0,
                "currency": model.currency,
                "current_monthly": advice.current_monthly,
                "recommended_monthly": advice.recommended_monthly,
                "saving_monthly": advice.saving_monthly,
            }
        )

    # quotas
    store = QuotaStore(engine, cluster)
    api_limits = store.limits()
    if api_limits:
        source = "kubernetes"
        limits = [(q.namespace, q.resource, q.hard, q.used) for q in api_limits]
    else:
        limits = reader.ksm_quotas()
        source = "kube-state-metrics" if limits else "none"
    held, active = reader.quota_use(pods)
    unit_prices = _unit_prices(reader.unit_shares(), prices)
    quota_rows = []
    for f in figures(limits, held, active, unit_prices):
        quota_rows.append(
            {
                "computed_at": end,
                "window_start": start,
                "window_end": end,
                "team": teams.namespace(f.namespace),
                "namespace": f.namespace,
                "resource": f.resource,
                "source": source if f.hard is not None else "none",
                "hard_milli": None if f.hard is None else int(f.hard * 1000),
                "used_milli": None if f.used is None else int(f.used * 1000),
                "held_milli": int((f.held * 1000).to_integral_value()),
                "active_milli": int((f.active * 1000).to_integral_value()),
                "currency": model.currency,
                "unit_price": f.unit_price,
                "unused_monthly": f.unused_monthly,
                "idle_monthly": f.idle_monthly,
            }
        )
    return AdviceRun(recs, quota_rows)


def run(
    engine: Engine,
    prom: PrometheusReader,
    model: CostModel,
    cluster: str,
    end: datetime,
    options: Options | None = None,
) -> AdviceRun:
    """Compute and store (replacing the cluster's last advice)."""
    outcome = compute(engine, prom, model, cluster, end, options)
    save_advice(engine, cluster, outcome.recommendations, outcome.quotas)
    return outcome


MODEL_KIND = "Model"  # a served model's recommendation: workload_kind, the model its name


def _serving(
    engine: Engine,
    cluster: str,
    window: tuple[datetime, datetime],
    pods: dict[tuple[str, str, str], PodEvidence],
    fleet: Fleet,
    rules: Rules,
    currency: str,
) -> tuple[list[dict[str, Any]], set[tuple[str, str]]]:
    """Recommendations per served model (namespace, model, GPU model) from the hours its pods
    served it (costsvc/advice/rightsizing.py: ``advise_serving``), and the pods they size (those of
    a model with enough data: the workload rules leave them alone)."""
    start, end = window
    window_hours = Decimal(int((end - start).total_seconds())) / 3600
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in serving_hours(engine, cluster, start, end):
        groups[(row["namespace"], row["model"], row["gpu_model"])].append(row)
    recs: list[dict[str, Any]] = []
    sized: set[tuple[str, str]] = set()
    for (namespace, name, gpu_model), rows in sorted(groups.items()):
        per_hour: dict[datetime, int] = defaultdict(int)
        busy: Decimal | None = Decimal(0)
        team_hours: dict[str, int] = defaultdict(int)
        for r in rows:
            per_hour[r["hour"]] += r["tokens"]
            team_hours[r["team"]] += r["gpu_hours"]
            held = Decimal(r["gpu_hours"]) / PPM
            if r["allocated"] - r["used"] - r["waste"] > 0:
                busy = None  # a pod with no utilisation series: throughput unknown
            elif busy is not None and r["allocated"]:
                busy += held * r["used"] / r["allocated"]
        members = sorted({r["pod"] for r in rows})
        evidence = [pods.get((namespace, p, gpu_model)) for p in members]
        memory = [e.memory_peak if e is not None else None for e in evidence]
        ev = Serving(
            model_name=name,
            gpu_model=gpu_model,
            hours=Decimal(len(per_hour)),
            pod_hours=Decimal(len(rows)),
            gpu_hours=sum((Decimal(r["gpu_hours"]) for r in rows), Decimal(0)) / PPM,
            busy_gpu_hours=busy,
            tokens=sum(r["tokens"] for r in rows),
            peak_tokens=max(per_hour.values()),
            memory_peak_bytes=None
            if any(m is None for m in memory)
            else int(max(m for m in memory if m is not None)),
        )
        advice = advise_serving(ev, fleet, rules, window_hours)
        if advice.action != "insufficient":
            sized |= {(namespace, p) for p in members}
        team = min(team_hours, key=lambda t: (-team_hours[t], t))
        busy_ratio = busy / ev.gpu_hours if busy is not None and ev.gpu_hours else None
        recs.append(
            {
                "computed_at": end,
                "window_start": start,
                "window_end": end,
                "team": team,
                "namespace": namespace,
                "workload_kind": MODEL_KIND,
                "workload": name[:253],
                "gpu_model": gpu_model,
                "pods": len(members),
                "action": advice.action,
                "target": advice.target[:128],
                "reason": advice.reason[:500],
                "device_hours": int(ev.pod_hours * PPM),
                "gpu_hours": int(ev.gpu_hours * PPM),
                "memory_p95_bytes": None,
                "memory_peak_bytes": ev.memory_peak_bytes,
                "activity_p95_ppm": _ppm(busy_ratio),
                "activity_source": "tokens",
                "idle_ppm": None,
                "current_share_ppm": _ppm(advice.current_share) or 0,
                "target_share_ppm": _ppm(advice.target_share) or 0,
                "currency": currency,
                "current_monthly": advice.current_monthly,
                "recommended_monthly": advice.recommended_monthly,
                "saving_monthly": advice.saving_monthly,
            }
        )
    return recs, sized


def _combine(gpu_model: str, pods: list[PodEvidence]) -> Evidence:
    """A workload's evidence from its pods': hours add up; memory and activity are the
    highest any pod needed (p95s: the highest pod p95); idle time weighted by hours; a
    figure missing for any pod is missing."""

    def highest(values: list[Decimal | None]) -> Decimal | None:
        return None if any(v is None for v in values) else max(v for v in values if v is not None)

    device_hours = sum((p.device_hours for p in pods), Decimal(0))
    idle_values = [p.idle_ratio for p in pods]
    idle = None
    if all(v is not None for v in idle_values) and device_hours > 0:
        idle = (
            sum(
                (p.device_hours * p.idle_ratio for p in pods if p.idle_ratio is not None),
                Decimal(0),
            )
            / device_hours
        )
    p95 = highest([p.memory_p95 for p in pods])
    peak = highest([p.memory_peak for p in pods])
    sources = sorted({p.activity_source for p in pods if p.activity_source})
    return Evidence(
        gpu_model=gpu_model,
        device_hours=device_hours,
        gpu_hours=sum((p.gpu_hours for p in pods), Decimal(0)),
        memory_p95_bytes=None if p95 is None else int(p95),
        memory_peak_bytes=None if peak is None else int(peak),
        activity_p95=highest([p.activity_p95 for p in pods]),
        activity_source="+".join(sources),
        idle_ratio=idle,
    )


def _unit_prices(
    shares: dict[str, list[tuple[str, Decimal, Decimal]]], prices: dict[str, int]
) -> dict[str, int]:
    """Price of one unit of each resource: the unit-weighted mean of share x model price over
    the units seen; a resource nobody held: a whole GPU (nvidia.com/gpu) at the mean fleet
    price, a MIG profile (nvidia.com/mig-<profile>) at its compute share of the models that
    have it."""
    out: dict[str, int] = {}
    for resource, seen in shares.items():
        priced = [(n, share * prices[m]) for m, n, share in seen if m in prices]
        total = sum((n for n, _ in priced), Decimal(0))
        if total:
            out[resource] = int(sum((n * p for n, p in priced), Decimal(0)) / total)
    if prices:
        out.setdefault("nvidia.com/gpu", sum(prices.values()) // len(prices))
        for model_name, price in sorted(prices.items()):
            table = mig_table(model_name)
            for p in table.profiles if table else ():
                share = Decimal(p.compute_slices) / table.compute_slices  # type: ignore[union-attr]
                out.setdefault(f"nvidia.com/mig-{p.name}", int(share * price))
    return out


def _unsanitised_hash(labels: dict[str, str] | None) -> dict[str, str]:
    """kube-state-metrics writes ``pod-template-hash`` as ``label_pod_template_hash``."""
    value = (labels or {}).get("label_pod_template_hash")
    return {"pod-template-hash": value} if value else {}


def table(rows: list[dict[str, Any]], top: int | None = None) -> str:
    """Stored recommendations (costsvc/advice/repository.py rows) as a plain-text table, biggest
    saving first; untrusted names are shown with control characters escaped."""
    from costsvc.kit.money import money

    def cell(text: str, width: int) -> str:
        safe = text.encode("unicode_escape").decode("ascii")
        return safe if len(safe) <= width else safe[: width - 1] + "~"

    head = (
        f"{'team':<14} {'namespace/workload':<34} {'GPU model':<24} {'action':<10} "
        f"{'target':<22} {'saving/month':>16} {'hours':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows[:top] if top is not None else rows:
        workload = f"{r['namespace']}/{r['workload_kind']}/{r['workload']}"
        lines.append(
            f"{cell(r['team'], 14):<14} {cell(workload, 34):<34} {cell(r['gpu_model'], 24):<24} "
            f"{r['action']:<10} {cell(r['target'], 22):<22} "
            f"{money(r['saving_monthly']) + ' ' + r['currency']:>16} "
            f"{r['device_hours'] // 1_000_000:>7}"
        )
    return "\n".join(lines)
