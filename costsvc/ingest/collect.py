"""One hour's facts from Prometheus, from the source whose series it holds.

Our exporter's series (``gpu-exporter``: costsvc/ingest/exporter_source.py) or NVIDIA
dcgm-exporter's with kube-state-metrics' (``dcgm-exporter``: costsvc/ingest/dcgm_source.py);
``auto``: ours when the hour has any of its series, else dcgm-exporter's. Either way through one
:class:`~costsvc.ingest.window.HourReads` over the run's
:class:`~costsvc.ingest.steady.SteadyReader`.
"""

from __future__ import annotations

from datetime import datetime

from costsvc.attribution import HourFacts
from costsvc.ingest import dcgm_source, exporter_source, integrals
from costsvc.ingest.steady import SteadyReader
from costsvc.ingest.window import HourReads

SOURCES = ("auto", "gpu-exporter", "dcgm-exporter")


def collect_hour(
    reader: SteadyReader, start: datetime, default_cluster: str, source: str = "auto"
) -> HourFacts:
    """The hour's facts from our exporter's series (``gpu-exporter``), from dcgm-exporter +
    kube-state-metrics (``dcgm-exporter``: costsvc/ingest/dcgm_source.py), or (``auto``) from
    ours when the hour has any of its series, else from dcgm-exporter's. With
    ``COSTSVC_INGEST_READS=integrals``, from our exporter's integrals where they tell the hour.
    The hour's reads are asked for at once, and the next planned hour's while this one is
    done."""
    if source not in SOURCES:
        raise ValueError(f"source {source!r}: one of {', '.join(SOURCES)}")
    w = HourReads(reader, start, default_cluster)
    if source != "dcgm-exporter" and reader.prom.reads == "integrals":
        # our exporter's integrals where they tell the hour (costsvc/ingest/integrals.py)
        found = integrals.collect_integrals(w, start)
        if found is not None:
            reader.counts.integral_hours += 1
            return found
    reads = dcgm_source.READS if source == "dcgm-exporter" else exporter_source.READS
    w.prefetch(reads)
    reader.ahead(start, reads)  # the next planned hour's, while this one is done
    try:
        if source != "dcgm-exporter":
            facts = exporter_source.collect_exporter(w, start)
            if source == "gpu-exporter" or facts.gpus or facts.holdings:
                return facts
        facts = HourFacts(start)
        dcgm_source.collect_dcgm(w, facts)
        return facts
    finally:
        w.cancel()
