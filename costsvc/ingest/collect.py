"""One hour's facts from Prometheus, each GPU's by the rule its source's series decide.

- A GPU whose device counter (our exporter's integrals, ``gpu_device_seconds_total``) covers
  the hour is read from the integrals: counter differences, two samples a series
  (costsvc/ingest/integrals.py).
- Any other GPU is read from the gauges: our exporter's before its counters (a node not yet
  upgraded, or in the hour of its upgrade: costsvc/ingest/gauges/exporter.py), or, in an hour
  without any of our exporter's series, NVIDIA dcgm-exporter's with kube-state-metrics'
  (costsvc/ingest/gauges/dcgm.py).

The choice is made here, per GPU and hour, and kept on each GPU's facts (``GpuHour.reads``,
stored in ``gpu_hours.reads``): docs/cost-model.md, "Two rules, one per source".
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from costsvc.ingest import integrals
from costsvc.ingest.gauges import dcgm, exporter
from costsvc.ingest.gauges.holding_hour import GaugeHour
from costsvc.ingest.reader import RunReader
from costsvc.rules.attribution import GAUGES, INTEGRALS, GpuKey, HourFacts

SOURCES = ("auto", "gpu-exporter", "dcgm-exporter")


def collect_hour(
    reader: RunReader, start: datetime, default_cluster: str, source: str = "auto"
) -> HourFacts:
    """The hour's facts: each GPU's from our exporter's integrals where they cover its hour,
    else from the gauges — our exporter's (``gpu-exporter``), dcgm-exporter +
    kube-state-metrics' (``dcgm-exporter``), or (``auto``) ours when the hour has any of its
    series, else dcgm-exporter's."""
    if source not in SOURCES:
        raise ValueError(f"source {source!r}: one of {', '.join(SOURCES)}")
    w = GaugeHour(reader, start, default_cluster)
    told = None if source == "dcgm-exporter" else integrals.collect_integrals(w, start)
    if told is not None:
        reader.counts.integral_hours += 1
        _stamp(told.facts, INTEGRALS)
        if not told.untold:
            reader.counts.integral_gpus += len(told.facts.gpus)
            return told.facts
        gauges = _gauges(w, start, source)  # (a rolling upgrade: some GPUs without counters)
        return _together(told.facts, gauges, told.untold, reader)
    facts = _gauges(w, start, source)
    reader.counts.gauge_gpus += len(facts.gpus)
    return facts


def _gauges(w: GaugeHour, start: datetime, source: str) -> HourFacts:
    """The hour's facts from the gauges. The hour's reads are asked for at once, and the next
    planned hour's while this one is done."""
    reads = dcgm.READS if source == "dcgm-exporter" else exporter.READS
    w.prefetch(reads)
    w.reader.ahead(start, reads)
    try:
        if source != "dcgm-exporter":
            facts = exporter.collect_exporter(w, start)
            if source == "gpu-exporter" or facts.gpus or facts.holdings:
                _stamp(facts, GAUGES)
                return facts
        facts = HourFacts(start)
        dcgm.collect_dcgm(w, facts)
        _stamp(facts, GAUGES)
        return facts
    finally:
        w.cancel()


def _stamp(facts: HourFacts, rule: str) -> None:
    """Each GPU of ``facts`` with the rule its hour was read by."""
    facts.gpus = [replace(g, reads=rule) for g in facts.gpus]


def _together(
    counted: HourFacts, gauges: HourFacts, untold: set[GpuKey], reader: RunReader
) -> HourFacts:
    """The integrals' GPUs with the gauges' of ``untold``: each GPU, its holdings and its node
    from one rule; the pods' labels and controllers from both reads."""
    facts = counted
    theirs = [g for g in gauges.gpus if g.key in untold]
    reader.counts.integral_gpus += len(facts.gpus)
    reader.counts.gauge_gpus += len(theirs)
    facts.gpus += theirs
    facts.holdings += [h for h in gauges.holdings if h.gpu in untold]
    facts.node_of.update({k: v for k, v in gauges.node_of.items() if k in untold})
    facts.pod_labels = {**gauges.pod_labels, **facts.pod_labels}
    facts.namespace_labels = {**gauges.namespace_labels, **facts.namespace_labels}
    facts.controllers = {**gauges.controllers, **facts.controllers}
    return facts
