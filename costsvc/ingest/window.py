"""One hour's reads from Prometheus, and what a holding measured in it, at sample resolution.

Both sources (our exporter: costsvc/ingest/exporter_source.py; dcgm-exporter + kube-state-metrics:
costsvc/ingest/dcgm_source.py) read their series through :class:`HourReads` and turn a holding's
series into facts with :func:`measure`, so the two apply one rule:

- a holding's share is a step function of time (:func:`costsvc.ingest.integrate.pieces`);
  time its GPU is reported lost (``gpu_device_up`` 0) is cut out of it — never charged to the
  holder, it is idle, and counted as the GPU's ``lost_seconds``;
- **used** is ∫ share(t) x utilisation(t) dt over the samples the holder actually held, not
  its share x the GPU's hour average: a pod that held a GPU 10:00-10:30 at 80 % and left is
  80 % efficient whatever the GPU did after. Where utilisation is unknown for part of the
  held time (a scrape gap in the utilisation series only), the efficiency of the part that
  was measured stands for the rest; where it is unknown for all of it, the holding's
  efficiency is unknown (None), never 0 % or 100 %;
- on a shared GPU (time-slice / MPS), the holder's own SM time counts only while it held a
  replica and the GPU was available, capped at its share (costsvc/attribution.py).

A usage series read as sums (costsvc/ingest/regular.py ``Regular``) is integrated from them
(:meth:`HourReads.integral`, :func:`measure_read`) where that gives the figure its samples would;
elsewhere its samples are read and measured as above.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TypeVar, cast

from costsvc.attribution import GpuHour, GpuKey, HourFacts
from costsvc.energy import NOTHING, Measured
from costsvc.ingest import regular, steady
from costsvc.ingest.integrate import (
    Piece,
    Sample,
    covered,
    holds,
    interval,
    max_gap_for,
    overlap,
    pieces,
    summed,
    total,
    without,
)
from costsvc.ingest.power import (
    ENERGY,
    LOWEST_POWER,
    POWER,
    counter_readings,
    lowest_power,
    power_readings,
)
from costsvc.ingest.prom import PrometheusReader, Series
from costsvc.workloads import controllers_of
from kube.label_names import ksm_labels

SCRAPE_GAP = Decimal(60)  # a silence longer than max(this, 2 scrape intervals) is a gap ...
MAX_GAP = Decimal(300)  # ... and one longer than this always is (Prometheus' staleness)
PRESENCE_GAP = Decimal(3600)  # a GPU seen in the hour exists between sightings
# a label or info series (kube-state-metrics' kube_pod_labels, owners; MIG instance info) is
# read over the hour and the look-back its holdings are read with: a pod whose last sample came
# just before the hour, or exactly at its start, still held the GPU into it (its samples hold
# until the next), and its labels must name its team whichever target was scraped last and
# whichever engine answers (a window's start is closed on Prometheus 2, open on Prometheus 3 and
# VictoriaMetrics: a sample exactly at the hour's start was in one and not the other)
LATEST_SECONDS = 3600 + int(MAX_GAP)
MICROSECOND = Decimal("0.000001")
SLACK = Decimal("1e-24")  # Decimal's 28 digits, summed in another order
Holes = list[tuple[Decimal, Decimal]]  # sorted, non-overlapping [since, until) intervals
T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class Regularity:
    """How a target's samples hold over an hour where its scrapes are evenly spaced: the
    look-back sample ``before`` seconds (0: none holds into the hour), each of the ``count``
    samples in the hour ``step`` seconds but the last, which holds ``last``."""

    before: Decimal
    step: Decimal
    count: int
    last: Decimal


def us(seconds: Decimal) -> Decimal:
    """Seconds rounded to micro-seconds: what is stored is exactly what was priced."""
    return seconds.quantize(MICROSECOND, rounding=ROUND_HALF_EVEN)


def _nothing(labels: dict[str, str]) -> None:
    return None


def merged(series: Iterable[Series]) -> Sequence[Sample]:
    """The samples of several series of one thing, in time order (one per instant); of one
    series, its own samples (already so: a steady series' stay :class:`steady.Steady`)."""
    series = list(series)
    if len(series) == 1:
        return series[0].samples
    by_time = {t: v for s in series for t, v in s.samples}
    return sorted(by_time.items())


def highest(samples: Sequence[Sample]) -> Decimal:
    """The highest value of a series' samples (a steady series': its value)."""
    if isinstance(samples, steady.Steady):
        return samples.value
    return max(v for _, v in samples)


class HourReads:
    """One hour [start, start + 1 h) of one Prometheus, for one default cluster."""

    def __init__(self, reader: steady.SteadyReader, start: datetime, cluster: str) -> None:
        self.reader, self.cluster = reader, cluster
        self.at = start + timedelta(hours=1) - timedelta(microseconds=1)  # the hour's last instant
        self.t0 = Decimal(str(start.timestamp()))
        self.t1 = self.t0 + 3600
        self._pending: dict[tuple[str, int], Future[list[Series]]] = {}
        self._shapes: dict[tuple[int, bool], tuple[list[Decimal], list[Piece]]] = {}
        self._regular: dict[int, tuple[list[Decimal], Regularity | None]] = {}

    @property
    def prom(self) -> PrometheusReader:
        """The query API itself, for the reads that are never synthesised."""
        return self.reader.prom

    def prefetch(self, reads: Iterable[tuple[str, Decimal]]) -> None:
        """Ask for these reads now: Prometheus answers the next while this one is integrated."""
        self._pending.update(self.reader.prefetch(self.at, reads))

    def cancel(self) -> None:
        for f in self._pending.values():
            f.cancel()

    def cluster_of(self, labels: dict[str, str]) -> str:
        return cluster_label(labels, self.cluster)

    def raw(self, selector: str, look_back: Decimal = MAX_GAP) -> list[Series]:
        """Every sample of ``selector`` in the hour and ``look_back`` before it (a steady
        series' samples synthesised from summaries: costsvc/ingest/steady.py)."""
        pending = self._pending.pop((selector, int(look_back)), None)
        if pending is not None:
            return pending.result()
        return self.reader.read(selector, self.at, 3600 + int(look_back))

    def latest(self, selector: str) -> list[dict[str, str]]:
        """The label sets of ``selector`` with a sample in the hour or its look-back
        (:data:`LATEST_SECONDS`), sorted."""
        return [lab for lab, _ in self.latest_with(selector, _nothing)]

    def latest_with(
        self, selector: str, derive: Callable[[dict[str, str]], T]
    ) -> list[tuple[dict[str, str], T]]:
        """:meth:`latest`, each label set with ``derive(labels)`` (worked out once per label
        set of a block of hours: costsvc/ingest/steady.py)."""
        return self.reader.latest(selector, self.at, LATEST_SECONDS, derive)

    def pieces(self, samples: Sequence[Sample]) -> list[Piece]:
        """The series as a step function over the hour, with the honest gap rule (a steady
        series': its target's shape, worked out once, with its value)."""
        if isinstance(samples, steady.Steady):
            v = samples.value
            return [(a, b, v) for a, b, _ in self._shape(samples.times, False)]
        step = interval(samples)
        gap = max_gap_for(samples, SCRAPE_GAP, MAX_GAP, step)
        return pieces(samples, self.t0, self.t1, gap, step)

    def function(self, group: Iterable[Series]) -> list[Piece]:
        """The sum of several series of one thing (each with its own gaps) over the hour."""
        return summed(self.pieces(s.samples) for s in group)

    def present(self, samples: Sequence[Sample]) -> Decimal:
        if isinstance(samples, steady.Steady):
            return total(self._shape(samples.times, True))
        return covered(samples, self.t0, self.t1, PRESENCE_GAP)

    def _shape(self, times: list[Decimal], presence: bool) -> list[Piece]:
        """Pieces of value 1 at ``times``: with the honest gap rule (:meth:`pieces`), or with
        the presence rule (:meth:`present`); the same for every steady series of a target."""
        key = (id(times), presence)
        found = self._shapes.get(key)
        if found is None or found[0] is not times:
            one = Decimal(1)
            ones = [(t, one) for t in times]
            if presence:
                shape = pieces(ones, self.t0, self.t1, PRESENCE_GAP, interval(ones))
            else:
                step = interval(ones)
                gap = max_gap_for(ones, SCRAPE_GAP, MAX_GAP, step)
                shape = pieces(ones, self.t0, self.t1, gap, step)
            found = self._shapes[key] = (times, shape)
        return found[1]

    def integral(self, samples: Sequence[Sample]) -> tuple[Decimal, Decimal] | None:
        """∫ value dt over the hour of a series read as sums (:class:`regular.Regular`), with
        the holding rule of :meth:`pieces`: (the value, a bound on its error: the engine's
        float sums). None where its target's scrapes in the hour are not evenly spaced (a
        scrape late by more than Prometheus' timestamp tolerance, a gap) or a value the
        integral needs is missing: then only its samples tell."""
        if not isinstance(samples, regular.Regular):
            return None
        shape = self._regularity(samples.times)
        if shape is None:
            return None
        found = Decimal(0)
        if shape.before:  # the look-back sample, held into the hour
            if samples.before is None:
                return None
            found += samples.before * shape.before
        if shape.count:  # every sample in the hour holds one step, but the last
            if samples.last is None:
                return None
            found += shape.step * (samples.total - samples.last) + samples.last * shape.last
        # the error of the engine's sums, and a hair for rounding at Decimal's 28 digits
        # (the integral of the samples, summed in another order)
        return found, shape.step * samples.error + abs(found) * SLACK + SLACK

    def _regularity(self, times: list[Decimal]) -> Regularity | None:
        """How the samples at ``times`` hold over the hour (:meth:`integral`), worked out
        once per target."""
        found = self._regular.get(id(times))
        if found is None or found[0] is not times:
            one = Decimal(1)
            ones = [(t, one) for t in times]
            step = interval(ones)
            gap = max_gap_for(ones, SCRAPE_GAP, MAX_GAP, step)
            held = [until - since for since, until, _ in holds(ones, self.t0, self.t1, gap, step)]
            inside = sum(1 for t in times if self.t0 <= t < self.t1)  # each holds a while
            before = held[0] if len(held) == inside + 1 else Decimal(0)
            held = held[len(held) - inside :]
            shape = None
            if all(d == held[0] for d in held[:-1]):
                shape = Regularity(
                    before,
                    held[0] if inside > 1 else Decimal(0),
                    inside,
                    held[-1] if held else Decimal(0),
                )
            found = self._regular[id(times)] = (times, shape)
        return found[1]

    def lost(self, up: Sequence[Sample]) -> Holes:
        """When ``gpu_device_up`` said 0 (the GPU lost), as intervals of the hour."""
        out: Holes = []
        for since, until, v in self.pieces(up):
            if v != 0:
                continue
            if out and out[-1][1] == since:
                out[-1] = (out[-1][0], until)
            else:
                out.append((since, until))
        return out


def measure(
    share: Sequence[Piece],
    lost: Holes,
    utilisation: Sequence[Piece] | None,
    sm: Sequence[Piece] | None,
) -> tuple[Decimal, Decimal | None, Decimal | None]:
    """A holding's (share seconds, utilisation of what it held, own SM seconds while held).

    ``share``: its share of the physical GPU over the hour; ``lost``: when the GPU was lost
    (cut out); ``utilisation``: the device's (GPU or MIG instance) utilisation 0..1, None when
    it has no series; ``sm``: the holder's own SM utilisation of the GPU, None when unknown.
    The utilisation is None (unknown) when no utilisation sample falls in the held time."""
    held = [p for p in without(share, lost) if p[2] > 0]
    return total(held), _utilisation(held, utilisation), _own(held, sm)


def _utilisation(held: Sequence[Piece], utilisation: Sequence[Piece] | None) -> Decimal | None:
    if utilisation is None:
        return None
    one = Decimal(1)
    busy = measured = Decimal(0)
    for since, until, s, u in overlap(held, utilisation):
        part = s * (until - since)
        measured += part
        busy += part * (u if u < one else one)
    return busy / measured if measured else None


def _own(held: Sequence[Piece], sm: Sequence[Piece] | None) -> Decimal | None:
    if sm is None:
        return None
    own = Decimal(0)
    for since, until, _, v in overlap(held, sm):
        own += v * (until - since)
    return own


Bounds = tuple[Decimal, Decimal]  # the least and the most a figure can be


@dataclasses.dataclass
class Usage:
    """What a holder used over the hour: its device's utilisation (``percent``: the values
    are percent) or its own SM time (``summed``: the sum of its series, each with its own
    gaps; else one function of their samples merged)."""

    series: list[Series]
    percent: bool = False
    summed: bool = False
    _pieces: list[Piece] | None = None

    def pieces(self, w: HourReads) -> list[Piece]:
        """The step function over the hour (its samples read now where they were not)."""
        if self._pieces is None:
            if self.summed:
                self._pieces = w.function(self.series)
            elif self.percent:
                self._pieces = [(a, b, v / 100) for a, b, v in w.pieces(merged(self.series))]
            else:
                self._pieces = w.pieces(merged(self.series))
        return self._pieces

    @property
    def ready(self) -> bool:
        """Its samples are at hand (no series read as sums only)."""
        return not any(_unread(s.samples) for s in self.series)

    def integral(
        self, w: HourReads, times: list[Decimal]
    ) -> tuple[Decimal, Decimal, Decimal] | None:
        """∫ value dt over the hour (:meth:`HourReads.integral`) of a usage that is one series
        read as sums over the target scraped at ``times``: (value, error bound, the largest
        value); None where its samples are needed."""
        if len(self.series) != 1:
            return None
        samples = self.series[0].samples
        if not isinstance(samples, regular.Regular) or samples.times is not times:
            return None
        found = w.integral(samples)
        if found is None:
            return None
        value, error = found
        if self.percent:
            return value / 100, error / 100, samples.peak / 100
        return value, error, samples.peak


def _unread(samples: Sequence[Sample]) -> bool:
    return isinstance(samples, regular.Regular) and not samples.loaded


def measure_read(
    w: HourReads,
    share: Sequence[Sequence[Sample]],
    lost: Holes,
    utilisation: Usage | None,
    sm: Usage | None,
) -> tuple[Decimal, Bounds | None, Bounds | None] | None:
    """:func:`measure` of a holding whose share is one steady series on a GPU never lost,
    without reading the samples of a usage read as sums (:class:`regular.Regular`) on the
    same target: (share seconds, bounds of the utilisation, bounds of the own SM seconds).
    None where that cannot be done: the caller reads the samples and measures them."""
    if lost or len(share) != 1 or not isinstance(share[0], steady.Steady):
        return None
    times = share[0].times
    held = [p for p in w.pieces(share[0]) if p[2] > 0]
    span = sum((b - a for a, b, _ in held), Decimal(0))
    util: Bounds | None = None
    if utilisation is not None:
        if utilisation.ready:
            found = _utilisation(held, utilisation.pieces(w))
            util = None if found is None else (found, found)
        else:
            summed = utilisation.integral(w, times)
            if summed is None or summed[2] > 1 or not span:
                return None  # a value above 1 is capped sample by sample: read them
            value, error, _ = summed
            util = ((value - error) / span, (value + error) / span)
    own: Bounds | None = None
    if sm is not None:
        if sm.ready:
            found = _own(held, sm.pieces(w))
            own = None if found is None else (found, found)
        else:
            summed = sm.integral(w, times)
            if summed is None:
                return None
            value, error, _ = summed
            own = (value - error, value + error)
    return total(held), util, own


def grouped(
    w: HourReads,
    selector: str,
    key: Callable[[dict[str, str]], tuple[str, ...]],
    look_back: Decimal = MAX_GAP,
) -> dict[tuple[str, ...], list[Series]]:
    """The series of ``selector`` grouped by what they describe (``key`` of their labels)."""
    out: dict[tuple[str, ...], list[Series]] = {}
    for s in w.raw(selector, look_back):
        out.setdefault(key(s.labels), []).append(s)
    return out


def pod_and_namespace_labels(w: HourReads, facts: HourFacts) -> None:
    """kube-state-metrics' ``kube_pod_labels`` / ``kube_namespace_labels`` of the hour."""
    # (keys: the cluster and ``names``' values, as the facts key them)
    pods = _latest_labels(w, "kube_pod_labels", ("namespace", "pod"))
    facts.pod_labels.update(cast(dict[tuple[str, str, str], dict[str, str]], pods))
    spaces = _latest_labels(w, "kube_namespace_labels", ("namespace",))
    facts.namespace_labels.update(cast(dict[tuple[str, str], dict[str, str]], spaces))


# kube-state-metrics' owner series (docs/pod-metrics.md, replicaset-metrics.md, job-metrics.md:
# owner_kind, owner_name, owner_is_controller; "<none>" for an object without owners), and the
# label naming the owned object in each
OWNER_SERIES = (
    ("kube_pod_owner", "pod"),
    ("kube_replicaset_owner", "replicaset"),
    ("kube_job_owner", "job_name"),
)
NO_OWNER = "<none>"


def pod_controllers(w: HourReads, facts: HourFacts) -> None:
    """The controller of each pod that held a GPU in the hour, from kube-state-metrics' owner
    series: a pod's ``kube_pod_owner`` (its controller reference, else its first owner), and
    one level up ``kube_replicaset_owner`` / ``kube_job_owner`` (a Deployment, a CronJob)."""
    held = {(h.cluster, h.namespace, h.pod) for h in facts.holdings}
    if not held:
        return
    owners: dict[str, dict[tuple[str, str, str], list[tuple[bool, str, str]]]] = {}
    for metric, name in OWNER_SERIES:
        found = owners.setdefault(name, {})
        for lab in w.latest(metric):
            kind, owner = lab.get("owner_kind", ""), lab.get("owner_name", "")
            key = (w.cluster_of(lab), lab.get("namespace", ""), lab.get(name, ""))
            if kind and NO_OWNER not in (kind, owner):
                is_controller = lab.get("owner_is_controller") == "true"
                found.setdefault(key, []).append((not is_controller, kind, owner))
            else:
                found.setdefault(key, [])
    pods = {k: v for k, v in owners["pod"].items() if k in held}
    if not pods:
        return
    for cluster in sorted({k[0] for k in pods}):
        parents = [
            ((ns, (kind, obj)), _first(refs))
            for name, kind in (("replicaset", "ReplicaSet"), ("job_name", "Job"))
            for (c, ns, obj), refs in owners[name].items()
            if c == cluster
        ]
        mine = {(ns, pod): _first(refs) for (c, ns, pod), refs in pods.items() if c == cluster}
        labels = {
            (ns, pod): {"pod-template-hash": lab.get("label_pod_template_hash", "")}
            for (c, ns, pod), lab in facts.pod_labels.items()
            if c == cluster and (ns, pod) in mine
        }
        for (ns, pod), controller in controllers_of(mine, parents, labels).items():
            facts.controllers[(cluster, ns, pod)] = controller


def _first(refs: list[tuple[bool, str, str]]) -> tuple[str, str] | None:
    """The controller among an object's owners (else the first by kind and name); None: it
    has none."""
    return min(refs)[1:] if refs else None


def add_gpu(
    facts: HourFacts,
    cluster: str,
    uuid: str,
    lab: dict[str, str],
    present: Decimal,
    lost: Decimal = Decimal(0),
) -> None:
    # dcgm-exporter's releases (and our exporter by default) write Hostname, its main branch
    # hostname (NVIDIA/dcgm-exporter#655; gpu-exporter --hostname-label hostname)
    node = lab.get("Hostname") or lab.get("hostname", "")
    facts.gpus.append(
        GpuHour(
            cluster,
            node,
            uuid,
            lab.get("modelName", ""),
            lab.get("node_pool") or None,
            present,
            lost_seconds=lost,
        )
    )
    facts.node_of[(cluster, uuid)] = node


def cluster_label(labels: Mapping[str, str], default: str) -> str:
    """A series' cluster: its ``cluster`` label, else the service's own cluster."""
    return labels.get("cluster") or default


_KEYED: dict[
    tuple[tuple[str, ...], str],
    Callable[[dict[str, str]], tuple[tuple[str, ...], dict[str, str]]],
] = {}


def _keyed(
    names: tuple[str, ...], cluster: str
) -> Callable[[dict[str, str]], tuple[tuple[str, ...], dict[str, str]]]:
    """A series' object (its cluster, ``names``' values) and ``label_*`` labels: one function
    per names and default cluster, so that a block of hours works it out once per label set
    (costsvc/ingest/steady.py ``latest``)."""
    found = _KEYED.get((names, cluster))
    if found is None:

        def derive(lab: dict[str, str]) -> tuple[tuple[str, ...], dict[str, str]]:
            key = (cluster_label(lab, cluster), *(lab.get(n, "") for n in names))
            return key, ksm_labels(lab)

        found = _KEYED[(names, cluster)] = derive
    return found


def _latest_labels(
    w: HourReads, metric: str, names: tuple[str, ...]
) -> dict[tuple[str, ...], dict[str, str]]:
    """Each object's ``label_*`` labels as last seen in the hour: one answer per series, and
    for the rare object relabelled within the hour (several series), its raw samples decide."""
    found: dict[tuple[str, ...], tuple[dict[str, str], dict[str, str]]] = {}
    several: dict[tuple[str, ...], list[dict[str, str]]] = {}  # (relabelled: its label sets)
    for lab, (key, own) in w.latest_with(metric, _keyed(names, w.cluster)):
        first = found.setdefault(key, (lab, own))
        if first[0] is not lab:
            several.setdefault(key, [first[0]]).append(lab)
    out = {key: own for key, (_, own) in found.items()}
    for key, sets in sorted(several.items()):
        match = ",".join(
            f'{n}="{v}"'
            for n, v in zip(names, key[1:], strict=True)
            if '"' not in v and "\\" not in v
        )
        newest: tuple[Decimal, dict[str, str]] | None = None
        for s in w.prom.raw(f"{metric}{{{match}}}", w.at, LATEST_SECONDS):
            if (w.cluster_of(s.labels), *(s.labels.get(n, "") for n in names)) != key:
                continue
            stamp = max((t for t, _ in s.samples if t < w.t1), default=None)
            if stamp is not None and (newest is None or stamp >= newest[0]):
                newest = (stamp, ksm_labels(s.labels))
        out[key] = newest[1] if newest else ksm_labels(sorted(sets, key=str)[-1])
    return out


def add_energy(
    w: HourReads, facts: HourFacts, energy: dict[GpuKey, Measured] | None = None
) -> None:
    """Each GPU's measured energy in the hour (costsvc/ingest/power.py): dcgm-exporter's
    series names, so both sources read it the same way; ``energy``: the counters' readings
    where the caller has them (costsvc/ingest/integrals.py), else read here."""
    limits = (w.t0, w.t1, w.cluster_of, SCRAPE_GAP, MAX_GAP)
    if energy is None:
        energy = counter_readings(w.raw(ENERGY, MAX_GAP), *limits)
    if any(g.key not in energy for g in facts.gpus):  # a GPU without a counter reading
        energy = {**power_readings(w.raw(POWER, MAX_GAP), *limits), **energy}
    lowest = lowest_power(w.prom.instant(LOWEST_POWER, w.at), w.cluster_of)
    for i, g in enumerate(facts.gpus):
        m = energy.get(g.key)
        low = lowest.get(g.key)
        if m is not None or low is not None:
            m = m or NOTHING
            facts.gpus[i] = dataclasses.replace(
                g,
                energy_mj=m.energy_mj,
                gap_mj=m.gap_mj,
                energy_seconds=us(m.seconds),
                min_power_mw=low,
            )
