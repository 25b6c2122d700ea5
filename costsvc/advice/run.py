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
from functools import partial
from typing import Any

from sqlalchemy import Engine

from costsvc.advice.evidence import EvidenceReader, FleetFacts, PodEvidence, PodKey
from costsvc.advice.quotas import figures
from costsvc.advice.repository import OwnerHistory, QuotaStore, save_advice
from costsvc.advice.rightsizing import (
    Advice,
    Evidence,
    Fleet,
    Rules,
    Serving,
    advise,
    advise_serving,
    mig_profiles,
)
from costsvc.inference.repository import serving_hours
from costsvc.ingest.prom import PrometheusReader
from costsvc.kit.money import round_micro, to_micro
from costsvc.labels.history import LabelHistory
from costsvc.rules.chargeback import UNALLOCATED
from costsvc.rules.cost_model import CostModel, LabelKeys
from costsvc.rules.owners import resolve_label, resolve_owner, sanitised_keys, with_history
from costsvc.rules.workloads import Workload, template_hash, workload_from_name, workload_of
from kube.label_names import ksm_labels

PPM = Decimal(1_000_000)
MODEL_KIND = "Model"  # a served model's recommendation: workload_kind, the model its name
Span = tuple[datetime, datetime]  # the window: [start, end)
Labels = dict[Any, dict[str, str]]  # object -> labels, kept form


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
    return None if value is None else to_micro(value)


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


@dataclass(frozen=True, slots=True)
class _Subject:
    """What a recommendation is about: a workload (or a served model) of a namespace on a GPU
    model, its pods and the team that held most of it."""

    team: str
    namespace: str
    workload: Workload
    gpu_model: str
    pods: int


def compute(
    engine: Engine,
    prom: PrometheusReader,
    model: CostModel,
    cluster: str,
    end: datetime,
    options: Options | None = None,
    *,
    store: bool = False,
) -> AdviceRun:
    """The recommendations and quota figures of the look-back window ending at ``end``;
    with ``store``, they replace the cluster's last advice (:data:`run`)."""
    opts = options or Options()
    span = (end - opts.window, end)
    reader = EvidenceReader(prom, end, int(opts.window.total_seconds()), opts.step_s)
    pods = reader.pods(opts.rules.idle_activity)
    fleet = _fleet(model, end, reader.fleet(), pods)
    # labels: Kubernetes-API history wins over kube-state-metrics (costsvc/rules/owners.py)
    hist_pods, hist_spaces = LabelHistory(engine, cluster).labels_during(*span)
    pod_labels = with_history(_ksm(reader.pod_labels()), hist_pods)
    spaces = with_history(_ksm(reader.namespace_labels()), hist_spaces)
    teams = _Teams(model.labels, pod_labels, spaces)
    # served models first: their pods are sized by the tokens they serve, not again below
    recs, sized = _serving(engine, cluster, span, pods, fleet, opts.rules, model.currency)
    workloads = _workloads(engine, cluster, span, pods, sized, pod_labels)
    for (namespace, wl, gpu_model), members in sorted(workloads.items()):
        evidence = _combine(gpu_model, [e for _, e in members])
        advice = advise(evidence, fleet, opts.rules, _hours(span))
        by_team: dict[str, Decimal] = defaultdict(Decimal)
        for pod, e in members:
            by_team[teams.pod(namespace, pod)] += e.device_hours
        team = min(by_team, key=lambda t: (-by_team[t], t)) if by_team else UNALLOCATED
        subject = _Subject(team, namespace, wl, gpu_model, len(members))
        measured = _measured(evidence)
        recs.append(_recommendation(span, subject, advice, advice.target, measured, model.currency))
    quotas = _quotas(engine, cluster, span, reader, pods, fleet, teams, model.currency)
    if store:
        save_advice(engine, cluster, recs, quotas)
    return AdviceRun(recs, quotas)


# compute, and store: the cluster's last advice replaced (``gpu-costsvc recommend``, ``serve``)
run = partial(compute, store=True)


def _hours(span: Span) -> Decimal:
    start, end = span
    return Decimal(int((end - start).total_seconds())) / 3600


def _ksm(found: dict[Any, dict[str, str]]) -> Labels:
    """kube-state-metrics' ``kube_*_labels`` series' labels: the object's own (``label_*``)."""
    return {k: ksm_labels(v) for k, v in found.items()}


def _fleet(model: CostModel, end: datetime, facts: FleetFacts, pods: dict[PodKey, Any]) -> Fleet:
    """The options' prices (the cost model in force at ``end``, per GPU model seen), memory
    and published MIG geometry."""
    version = model.version_at(end)
    prices: dict[str, int] = {}
    for name in sorted(facts.models | {k[2] for k in pods}):
        price = model.price_at(end, name) if version is not None else None
        if price is not None:
            prices[name] = price.micro_per_hour()
    basis = model.policies.mig_share_basis
    return Fleet(prices, facts.memory_bytes, basis, facts.mig_geometry)


def _workloads(
    engine: Engine,
    cluster: str,
    span: Span,
    pods: dict[PodKey, PodEvidence],
    sized: set[tuple[str, str]],
    pod_labels: Labels,
) -> dict[tuple[str, Workload, str], list[tuple[str, PodEvidence]]]:
    """The pods not sized as served models, by namespace, workload and GPU model: the owners
    the Kubernetes API reported, else the pods' names (and ``pod-template-hash``)."""
    owners, parents = OwnerHistory(engine, cluster).owners_during(*span)
    by_namespace: dict[str, dict[tuple[str, str], tuple[str, str] | None]] = defaultdict(dict)
    for (ns, controller), parent in parents.items():
        by_namespace[ns][controller] = parent
    groups: dict[tuple[str, Workload, str], list[tuple[str, PodEvidence]]] = defaultdict(list)
    for (namespace, pod, gpu_model), ev in pods.items():
        if (namespace, pod) in sized:
            continue
        labels = template_hash(pod_labels.get((namespace, pod)))
        if (namespace, pod) in owners:
            wl = workload_of(pod, owners[(namespace, pod)], by_namespace[namespace], labels)
        else:
            wl = workload_from_name(pod, labels)
        groups[(namespace, wl, gpu_model)].append((pod, ev))
    return groups


def _measured(evidence: Evidence) -> dict[str, Any]:
    """A workload's evidence as a stored recommendation keeps it."""
    return {
        "device_hours": to_micro(evidence.device_hours),
        "gpu_hours": to_micro(evidence.gpu_hours),
        "memory_p95_bytes": evidence.memory_p95_bytes,
        "memory_peak_bytes": evidence.memory_peak_bytes,
        "activity_p95_ppm": _ppm(evidence.activity_p95),
        "activity_source": evidence.activity_source,
        "idle_ppm": _ppm(evidence.idle_ratio),
    }


def _recommendation(
    span: Span,
    subject: _Subject,
    advice: Advice,
    target: str,
    measured: dict[str, Any],
    currency: str,
) -> dict[str, Any]:
    """A stored recommendation's row: what it is about, the advice (``target`` as kept), the
    evidence (``measured``) and the money."""
    start, end = span
    return {
        "computed_at": end,
        "window_start": start,
        "window_end": end,
        "team": subject.team,
        "namespace": subject.namespace,
        "workload_kind": subject.workload.kind,
        "workload": subject.workload.name,
        "gpu_model": subject.gpu_model,
        "pods": subject.pods,
        "action": advice.action,
        "target": target,
        "reason": advice.reason[:500],
        **measured,
        "current_share_ppm": _ppm(advice.current_share) or 0,
        "target_share_ppm": _ppm(advice.target_share) or 0,
        "currency": currency,
        "current_monthly": advice.current_monthly,
        "recommended_monthly": advice.recommended_monthly,
        "saving_monthly": advice.saving_monthly,
    }


def _serving(
    engine: Engine,
    cluster: str,
    span: Span,
    pods: dict[PodKey, PodEvidence],
    fleet: Fleet,
    rules: Rules,
    currency: str,
) -> tuple[list[dict[str, Any]], set[tuple[str, str]]]:
    """Recommendations per served model (namespace, model, GPU model) from the hours its pods
    served it (costsvc/advice/rightsizing.py: ``advise_serving``), and the pods they size (those of
    a model with enough data: the workload rules leave them alone)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in serving_hours(engine, cluster, *span):
        groups[(row["namespace"], row["model"], row["gpu_model"])].append(row)
    recs: list[dict[str, Any]] = []
    sized: set[tuple[str, str]] = set()
    for (namespace, name, gpu_model), rows in sorted(groups.items()):
        members = sorted({r["pod"] for r in rows})
        evidence = [pods.get((namespace, p, gpu_model)) for p in members]
        memory = [e.memory_peak if e is not None else None for e in evidence]
        ev, team = _served(name, gpu_model, rows, memory)
        advice = advise_serving(ev, fleet, rules, _hours(span))
        if advice.action != "insufficient":
            sized |= {(namespace, p) for p in members}
        model = Workload(MODEL_KIND, name[:253])
        subject = _Subject(team, namespace, model, gpu_model, len(members))
        target = advice.target[:128]
        recs.append(_recommendation(span, subject, advice, target, _served_measures(ev), currency))
    return recs, sized


def _served(
    name: str, gpu_model: str, rows: list[dict[str, Any]], memory: list[Decimal | None]
) -> tuple[Serving, str]:
    """A served model's evidence from the hours its pods served it (``memory``: each pod's
    peak, None unknown), and its team: the one whose pods held the most GPU-hours."""
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
    return ev, min(team_hours, key=lambda t: (-team_hours[t], t))


def _served_measures(ev: Serving) -> dict[str, Any]:
    """A served model's evidence as a stored recommendation keeps it: activity is the share
    of its GPU-hours it was busy."""
    busy = ev.busy_gpu_hours
    return {
        "device_hours": to_micro(ev.pod_hours),
        "gpu_hours": to_micro(ev.gpu_hours),
        "memory_p95_bytes": None,
        "memory_peak_bytes": ev.memory_peak_bytes,
        "activity_p95_ppm": _ppm(
            busy / ev.gpu_hours if busy is not None and ev.gpu_hours else None
        ),
        "activity_source": "tokens",
        "idle_ppm": None,
    }


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


def _quotas(
    engine: Engine,
    cluster: str,
    span: Span,
    reader: EvidenceReader,
    pods: dict[PodKey, PodEvidence],
    fleet: Fleet,
    teams: _Teams,
    currency: str,
) -> list[dict[str, Any]]:
    """Quota figures per namespace and GPU resource: the limits the Kubernetes API reported
    (else kube-state-metrics'), the units held and in use, what unused and idle units cost."""
    api_limits = QuotaStore(engine, cluster).limits()
    if api_limits:
        source = "kubernetes"
        limits = [(q.namespace, q.resource, q.hard, q.used) for q in api_limits]
    else:
        limits = reader.ksm_quotas()
        source = "kube-state-metrics" if limits else "none"
    held, active = reader.quota_use(pods)
    unit_prices = _unit_prices(reader.unit_shares(), fleet)
    start, end = span
    return [
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
            "currency": currency,
            "unit_price": f.unit_price,
            "unused_monthly": f.unused_monthly,
            "idle_monthly": f.idle_monthly,
        }
        for f in figures(limits, held, active, unit_prices)
    ]


def _unit_prices(
    shares: dict[str, list[tuple[str, Decimal, Decimal]]], fleet: Fleet
) -> dict[str, int]:
    """Price of one unit of each resource (micro-units an hour, rounded half to even): the
    unit-weighted mean of share x model price over the units seen; a resource nobody held: a
    whole GPU (nvidia.com/gpu) at the mean fleet price, a MIG profile (nvidia.com/mig-<profile>)
    at its compute share of the models that have it (of the published geometry first:
    costsvc/rules/mig.py)."""
    prices = fleet.prices
    out: dict[str, int] = {}
    for resource, seen in shares.items():
        priced = [(n, share * prices[m]) for m, n, share in seen if m in prices]
        total = sum((n for n, _ in priced), Decimal(0))
        if total:
            out[resource] = round_micro(sum((n * p for n, p in priced), Decimal(0)) / total)
    if prices:
        out.setdefault("nvidia.com/gpu", round_micro(Decimal(sum(prices.values())) / len(prices)))
        for model_name, price in sorted(prices.items()):
            for p, compute, _ in mig_profiles(model_name, fleet):
                out.setdefault(f"nvidia.com/mig-{p.name}", round_micro(compute * price))
    return out


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
