"""Turn one snapshot of the GPUs (and who holds them) into fresh metric families.

Nothing but label text is kept between collections: a GPU that went away is simply not
emitted. Device series carry ``namespace``/``pod``/``container`` where exactly one container
holds the device (a whole GPU, or a MIG instance). What each collection adds to the integrals
(exporter/integrals.py) is worked out here, beside the labels: :attr:`GpuRenderer.rates`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from exporter import catalogue as cat
from exporter.integrals import SHARE_LABEL
from exporter.pods.claims import ClaimRef, Holder
from exporter.pods.shares import Attribution, Unit
from exporter.render.exposition import Family, format_value, label_pairs
from exporter.render.label_text import GpuLabels, LabelCache, MigLabels, PodLabels
from exporter.snapshot import GpuState, MigState


@dataclass(slots=True)
class Rates:
    """One collection's integrands, by (counter family, label text): ``ahead`` — readings of
    an instant (held until the next collection); ``behind`` — readings over the interval just
    ended (a container's SM utilisation since the last collection)."""

    ahead: dict[tuple[str, str], float] = field(default_factory=dict)
    behind: dict[tuple[str, str], float] = field(default_factory=dict)


@dataclass(slots=True)
class _Gpu:
    """One GPU of the snapshot with its label text for this collection."""

    state: GpuState
    labels: GpuLabels
    series: str  # labels of its value series: the DCGM set, plus a sole holder's
    instances: list[tuple[MigState, MigLabels, str]]  # with their value series' labels


class GpuRenderer:
    def __init__(
        self,
        hostname: str,
        collectors: Iterable[str],
        pod_labels: PodLabels | None = None,
        hostname_label: str = "Hostname",
        pod_uid: Callable[[str, str], str | None] | None = None,
    ) -> None:
        self._on = frozenset(collectors)
        self.labels = LabelCache(hostname, pod_labels, hostname_label)
        self._pod_uid = pod_uid
        self.rates = Rates()  # of the last :meth:`families`

    def families(self, states: list[GpuState], attribution: Attribution | None) -> list[Family]:
        on = self._on
        gpus = self._label(states, attribution)
        self.rates = rates = Rates()
        up = Family(cat.DEVICE_UP.name, "gauge", cat.DEVICE_UP.help)
        info = Family(cat.DEVICE_INFO.name, "gauge", cat.DEVICE_INFO.help)
        seconds = cat.DEVICE_SECONDS.name
        for g in gpus:
            up.add(g.labels.base, 1 if g.state.up else 0)
            info.add(g.labels.info, 1)
            rates.ahead[(seconds, f'{g.labels.base},state="up"')] = 1.0 if g.state.up else 0.0
            rates.ahead[(seconds, f'{g.labels.base},state="down"')] = 0.0 if g.state.up else 1.0
        families = [up, info]

        live = [g for g in gpus if g.state.up]
        for series in cat.SCALAR_SERIES:
            if series.collector not in on:
                continue
            family = Family(series.name, series.kind, series.help)
            name = series.name
            per_instance = name in cat.MIG_INSTANCE_SERIES
            for g in live:
                value = g.state.values.get(name)
                if value is not None:
                    family.add(g.series, value)
                if per_instance:
                    for inst, _, labels in g.instances:
                        value = inst.values.get(name)
                        if value is not None:
                            family.add(labels, value)
            families.append(family)

        if "mig" in on:
            mig = Family(cat.MIG_INSTANCE_INFO.name, "gauge", cat.MIG_INSTANCE_INFO.help)
            for g in live:
                for _, mig_labels, labels in g.instances:
                    mig.add(f"{labels},{mig_labels.info}", 1)
            families.append(mig)

        if "xid" in on:  # of lost and hung GPUs too: XID 79 says why a GPU is gone
            last = Family(cat.XID_LAST.name, "gauge", cat.XID_LAST.help)
            xid = Family(cat.XID_COUNTER.name, "counter", cat.XID_COUNTER.help)
            for g in gpus:
                code = g.state.last_xid
                if code is None:
                    continue
                last.add(f"{g.labels.base},{self.labels.xid(code)}", code)
                for seen, count in sorted(g.state.xid_counts.items()):
                    xid.add(f'{g.labels.base},xid="{seen}"', count)
            families += [last, xid]

        if "clock_events" in on:
            active = Family(cat.CLOCK_EVENT_ACTIVE.name, "gauge", cat.CLOCK_EVENT_ACTIVE.help)
            for g in live:
                reasons = g.state.clock_event_reasons
                if reasons is None:
                    continue
                for labels, bit in g.labels.reasons:
                    active.add(labels, 1 if reasons & bit else 0)
            families.append(active)

        if "nvlink" in on or "nvlink_links" in on:
            families.extend(_nvlink_families(live))
        if attribution is not None:
            families.extend(self._attribution_families(gpus, attribution))
        return families

    def _label(self, states: list[GpuState], attribution: Attribution | None) -> list[_Gpu]:
        """Each GPU's and MIG instance's label text, with a sole holder's where there is one."""
        cache = self.labels
        cache.turn()
        exclusive = attribution.exclusive if attribution is not None else {}
        gpus = []
        for s in states:
            labels = cache.gpu(s.identity)
            series = labels.base
            if exclusive and not s.mig_enabled:
                holder = exclusive.get(Unit(s.identity.index, None))
                if holder is not None:
                    series = f"{series},{cache.holder(holder)}"
            instances = []
            for inst in s.instances:
                mig = cache.mig(labels, inst.instance, s.mig_geometry)
                text = mig.base
                if exclusive:
                    holder = exclusive.get(Unit(s.identity.index, inst.instance.gi_id))
                    if holder is not None:
                        text = f"{text},{cache.holder(holder)}"
                instances.append((inst, mig, text))
            gpus.append(_Gpu(s, labels, series, instances))
        return gpus

    def _attribution_families(self, gpus: list[_Gpu], a: Attribution) -> list[Family]:
        """Who holds which share of which device and what they use of it; the share-seconds
        counters' growth since the last collection (:attr:`Rates.ahead`, ``behind``)."""
        units, up, busy = _units(gpus)
        share, memory = self._share_families(a, units, up, busy)
        over = _oversubscribed_family(gpus, a)
        sm, mem = self._usage_families(a, units)
        return [share, memory, over, sm, mem, _unattributed_family(gpus, a)]

    def _share_families(
        self,
        a: Attribution,
        units: dict[Unit, str],
        up: dict[Unit, float],
        busy: dict[Unit, float],
    ) -> tuple[Family, Family]:
        """Each holding's compute and memory share; the rates its share-seconds counters grow
        at (held while its GPU is up, busy where its device's utilisation was read)."""
        who = self.labels.container
        ahead = self.rates.ahead
        share = Family(cat.ALLOCATION_SHARE.name, "gauge", cat.ALLOCATION_SHARE.help)
        memory = Family(cat.ALLOCATION_MEMORY_SHARE.name, "gauge", cat.ALLOCATION_MEMORY_SHARE.help)
        for key, value in sorted(a.shares.items(), key=_share_order):
            unit, holder, resource = key
            base = units.get(unit)
            if base is None:
                continue
            pairs = [("resource", resource)]
            claim = a.claims.get(key)
            if claim is not None:
                pairs.extend(self._claim_pairs(holder, claim))
            labels = f"{base},{who(holder)},{label_pairs(pairs)}"
            share.add(labels, value)
            memory.add(labels, a.memory_shares.get(key, value))
            # an over-subscribed GPU's holdings split it at this collection: each share over
            # the sum on its basis, as the cost service splits it (docs/cost-model.md)
            scaled = a.oversubscribed.get(unit.gpu_index, (False, False))
            compute_sum, memory_sum = a.sums.get(unit.gpu_index, (1.0, 1.0))
            held = up.get(unit, 0.0) * (value / compute_sum if scaled[0] else value)
            memory_held = up.get(unit, 0.0) * a.memory_shares.get(key, value)
            if scaled[1]:
                memory_held /= memory_sum
            measured = busy.get(unit)
            # the share-seconds name the share they integrate: a holding's largest share in an
            # hour (whether it is a replica, costsvc/rules/attribution.py is_shared) is in the
            # labels of its counters, with no read of the gauge's samples
            with_share = f'{labels},{SHARE_LABEL}="{format_value(value)}"'
            ahead[(cat.ALLOCATION_SHARE_SECONDS.name, with_share)] = held
            ahead[(cat.ALLOCATION_MEMORY_SHARE_SECONDS.name, labels)] = memory_held
            ahead[(cat.ALLOCATION_BUSY_SHARE_SECONDS.name, labels)] = (
                0.0 if measured is None else held * measured
            )
            ahead[(cat.ALLOCATION_UNMEASURED_SHARE_SECONDS.name, labels)] = (
                held if measured is None else 0.0
            )
        return share, memory

    def _usage_families(self, a: Attribution, units: dict[Unit, str]) -> tuple[Family, Family]:
        """Each container's SM utilisation (and the rate its SM-seconds grow at) and memory
        used on each device."""
        who = self.labels.container
        behind = self.rates.behind
        sm = Family(cat.CONTAINER_SM.name, "gauge", cat.CONTAINER_SM.help)
        mem = Family(cat.CONTAINER_MEMORY.name, "gauge", cat.CONTAINER_MEMORY.help)
        for (unit, holder), (util, used) in a.usage.items():
            base = units.get(unit)
            if base is None:
                continue
            labels = f"{base},{who(holder)}"
            claim = a.usage_claims.get((unit, holder))
            if claim is not None:
                labels = f"{labels},{label_pairs(self._claim_pairs(holder, claim))}"
            if util is not None:
                sm.add(labels, util)
                behind[(cat.CONTAINER_SM_SECONDS.name, labels)] = util
            mem.add(labels, used)
        return sm, mem

    def _claim_pairs(self, holder: Holder, claim: ClaimRef) -> list[tuple[str, str]]:
        """``claim_namespace``, ``claim`` and, where the pod directory knows it, ``pod_uid``."""
        pairs = [("claim_namespace", claim.namespace), ("claim", claim.name)]
        uid = self._pod_uid(holder.namespace, holder.pod) if self._pod_uid else None
        if uid:
            pairs.append(("pod_uid", uid))
        return pairs


def _units(gpus: list[_Gpu]) -> tuple[dict[Unit, str], dict[Unit, float], dict[Unit, float]]:
    """Each device unit (a GPU, a MIG instance): its series' labels, 1.0 while its GPU is up
    (a share held counts then, else 0.0), and its utilisation 0..1 where it was read."""
    units: dict[Unit, str] = {}
    up: dict[Unit, float] = {}
    busy: dict[Unit, float] = {}
    for g in gpus:
        index = g.state.identity.index
        units[Unit(index, None)] = g.labels.base
        up[Unit(index, None)] = 1.0 if g.state.up else 0.0
        active = _utilisation(g.state.values) if g.state.up else None
        if active is not None:
            busy[Unit(index, None)] = active
        for inst, mig, _ in g.instances:
            unit = Unit(index, inst.instance.gi_id)
            units[unit] = mig.base
            up[unit] = up[Unit(index, None)]
            active = _utilisation(inst.values) if g.state.up else None
            if active is not None:
                busy[unit] = active
    return units, up, busy


def _oversubscribed_family(gpus: list[_Gpu], a: Attribution) -> Family:
    """Whether each held GPU's shares add up to more than it, on either basis."""
    over = Family(cat.ALLOCATION_OVERSUBSCRIBED.name, "gauge", cat.ALLOCATION_OVERSUBSCRIBED.help)
    for g in gpus:
        flags = a.oversubscribed.get(g.state.identity.index)
        if flags is not None:
            over.add(f'{g.labels.base},basis="compute"', int(flags[0]))
            over.add(f'{g.labels.base},basis="memory"', int(flags[1]))
    return over


def _unattributed_family(gpus: list[_Gpu], a: Attribution) -> Family:
    """Each up GPU's processes that belong to no container."""
    unmapped = Family(cat.UNATTRIBUTED.name, "gauge", cat.UNATTRIBUTED.help)
    for g in gpus:
        s = g.state
        if s.up and s.processes:
            unmapped.add(g.labels.base, a.unattributed_processes.get(s.identity.index, 0))
    return unmapped


def _utilisation(values: dict[str, float]) -> float | None:
    """A device's utilisation 0..1 as the cost service prices use: the graphics engine's
    activity where it was read, else the GPU utilisation / 100 (docs/cost-model.md, "Used")."""
    active = values.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    if active is None:
        percent = values.get("DCGM_FI_DEV_GPU_UTIL")
        active = None if percent is None else percent / 100
    return None if active is None else min(active, 1.0)  # (at most all of it, as priced)


def _share_order(item: tuple[tuple[Unit, Holder, str], float]) -> tuple[int, int, Holder]:
    (unit, holder, _), _ = item
    return unit.gpu_index, unit.gi_id or 0, holder


def _nvlink_families(live: list[_Gpu]) -> list[Family]:
    totals: list[Family] = []
    per_link: dict[str, Family] = {}
    for counter, base in cat.NVLINK_DCGM_NAMES.items():
        help_text = cat.NVLINK_HELP[counter]
        total = Family(f"{base}_TOTAL", "counter", f"{help_text} total for all links.")
        for g in live:
            s = g.state
            if counter in s.nvlink_totals:
                total.add(g.series, s.nvlink_totals[counter])
            for (c, link), n in s.nvlink.items():
                if c != counter:
                    continue
                name = f"{base}_L{link}"
                family = per_link.get(name)
                if family is None:
                    family = per_link[name] = Family(
                        name, "counter", f"{help_text} for link {link}."
                    )
                family.add(g.series, n)
        totals.append(total)
    return totals + [per_link[k] for k in sorted(per_link, key=_link_order)]


def _link_order(name: str) -> tuple[str, int]:
    base, _, link = name.rpartition("_L")
    return base, int(link)
