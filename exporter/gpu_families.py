"""Turn one snapshot of the GPUs into fresh metric families (nothing is kept between
collections: a GPU that went away is simply not emitted)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from exporter import catalogue as cat
from exporter.exposition import Family, label_pairs
from exporter.nvml import CLOCK_EVENT_REASONS
from exporter.pods.claims import Holder
from exporter.pods.shares import Attribution, Unit, holder_labels
from exporter.sampler import GpuState


def with_holders(states: list[GpuState], attribution: Attribution | None) -> list[GpuState]:
    """Add namespace/pod/container to the labels of devices exactly one container holds."""
    if attribution is None or not attribution.exclusive:
        return states
    for s in states:
        holder = attribution.exclusive.get(Unit(s.identity.index, None))
        if holder is not None and not s.mig_enabled:
            s.labels = f"{s.identity.labels},{holder_labels(holder)}"
        for inst in s.instances:
            holder = attribution.exclusive.get(Unit(s.identity.index, inst.instance.gi_id))
            if holder is not None:
                inst.labels = f"{inst.labels},{holder_labels(holder)}"
    return states


def gpu_families(
    states: list[GpuState],
    collectors: Iterable[str],
    attribution: Attribution | None = None,
    pod_labels: Callable[[Holder], str] | None = None,
) -> list[Family]:
    on = frozenset(collectors)
    states = with_holders(states, attribution)
    up = Family(cat.DEVICE_UP.name, "gauge", cat.DEVICE_UP.help)
    info = Family(cat.DEVICE_INFO.name, "gauge", cat.DEVICE_INFO.help)
    for s in states:
        ident = s.identity
        up.add(ident.labels, 1 if s.up else 0)
        extra = label_pairs((("serial", ident.serial), ("vbios_version", ident.vbios)))
        info.add(f"{ident.labels},{extra}", 1)
    families = [up, info]

    live = [s for s in states if s.up]
    for series in cat.SCALAR_SERIES:
        if series.collector not in on:
            continue
        family = Family(series.name, series.kind, series.help)
        name = series.name
        per_instance = name in cat.MIG_INSTANCE_SERIES
        for s in live:
            value = s.values.get(name)
            if value is not None:
                family.add(s.labels, value)
            if per_instance:
                for inst in s.instances:
                    value = inst.values.get(name)
                    if value is not None:
                        family.add(inst.labels, value)
        families.append(family)

    if "mig" in on:
        info = Family(cat.MIG_INSTANCE_INFO.name, "gauge", cat.MIG_INSTANCE_INFO.help)
        for s in live:
            for inst in s.instances:
                i = inst.instance
                extra = label_pairs(
                    (
                        ("mig_uuid", i.uuid),
                        ("GPU_CI_ID", str(i.ci_id)),
                        ("compute_slices", str(i.compute_slices)),
                        ("memory_slices", str(i.memory_slices)),
                    )
                )
                info.add(f"{inst.labels},{extra}", 1)
        families.append(info)

    if "xid" in on:
        xid = Family(cat.XID_COUNTER.name, "counter", cat.XID_COUNTER.help)
        for s in live:
            for code, count in sorted(s.xid_counts.items()):
                xid.add(f'{s.identity.labels},xid="{code}"', count)
        families.append(xid)

    if "clock_events" in on:
        active = Family(cat.CLOCK_EVENT_ACTIVE.name, "gauge", cat.CLOCK_EVENT_ACTIVE.help)
        for s in live:
            if s.clock_event_reasons is None:
                continue
            for reason, bit in CLOCK_EVENT_REASONS.items():
                active.add(
                    f'{s.identity.labels},reason="{reason}"',
                    1 if s.clock_event_reasons & bit else 0,
                )
        families.append(active)

    if "nvlink" in on or "nvlink_links" in on:
        families.extend(_nvlink_families(live))
    if attribution is not None:
        families.extend(_attribution_families(states, attribution, pod_labels))
    return families


def _unit_labels(states: list[GpuState]) -> dict[Unit, str]:
    labels: dict[Unit, str] = {}
    for s in states:
        labels[Unit(s.identity.index, None)] = s.identity.labels
        for inst in s.instances:
            extra = label_pairs(
                (("GPU_I_PROFILE", inst.instance.profile), ("GPU_I_ID", str(inst.instance.gi_id)))
            )
            labels[Unit(s.identity.index, inst.instance.gi_id)] = f"{s.identity.labels},{extra}"
    return labels


def _attribution_families(
    states: list[GpuState], a: Attribution, pod_labels: Callable[[Holder], str] | None
) -> list[Family]:
    units = _unit_labels(states)

    def who(holder: Holder) -> str:
        extra = pod_labels(holder) if pod_labels is not None else ""
        return f"{holder_labels(holder)},{extra}" if extra else holder_labels(holder)

    share = Family(cat.ALLOCATION_SHARE.name, "gauge", cat.ALLOCATION_SHARE.help)
    for (unit, holder, resource), value in sorted(
        a.shares.items(), key=lambda kv: (kv[0][0].gpu_index, kv[0][0].gi_id or 0, kv[0][1])
    ):
        base = units.get(unit)
        if base is not None:
            extra = label_pairs((("resource", resource),))
            share.add(f"{base},{who(holder)},{extra}", value)
    sm = Family(cat.CONTAINER_SM.name, "gauge", cat.CONTAINER_SM.help)
    mem = Family(cat.CONTAINER_MEMORY.name, "gauge", cat.CONTAINER_MEMORY.help)
    for (unit, holder), (util, used) in a.usage.items():
        base = units.get(unit)
        if base is None:
            continue
        labels = f"{base},{who(holder)}"
        if util is not None:
            sm.add(labels, util)
        mem.add(labels, used)
    unmapped = Family(cat.UNATTRIBUTED.name, "gauge", cat.UNATTRIBUTED.help)
    for s in states:
        if s.up and s.processes:
            unmapped.add(s.identity.labels, a.unattributed_processes.get(s.identity.index, 0))
    return [share, sm, mem, unmapped]


def _nvlink_families(live: list[GpuState]) -> list[Family]:
    totals: list[Family] = []
    per_link: dict[str, Family] = {}
    for counter, base in cat.NVLINK_DCGM_NAMES.items():
        help_text = cat.NVLINK_HELP[counter]
        total = Family(f"{base}_TOTAL", "counter", f"{help_text} total for all links.")
        for s in live:
            if counter in s.nvlink_totals:
                total.add(s.labels, s.nvlink_totals[counter])
            for (c, link), n in s.nvlink.items():
                if c != counter:
                    continue
                name = f"{base}_L{link}"
                family = per_link.get(name)
                if family is None:
                    family = per_link[name] = Family(
                        name, "counter", f"{help_text} for link {link}."
                    )
                family.add(s.labels, n)
        totals.append(total)
    return totals + [per_link[k] for k in sorted(per_link, key=_link_order)]


def _link_order(name: str) -> tuple[str, int]:
    base, _, link = name.rpartition("_L")
    return base, int(link)
