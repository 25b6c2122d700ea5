"""Synthetic Prometheus history for the cost-service ground-truth tests, written as
OpenMetrics and loaded into a real Prometheus with ``promtool tsdb create-blocks-from
openmetrics`` (the ``prometheus`` fixture in conftest.py). Prices 2.50 per GPU-hour unless a
test says otherwise. Hand-computed money:

hour 2026-11-10 05:00 UTC
GPU-A  pod ml/p (team nlp) holds it 05:00-05:30, busy 80 %  -> allocated 1.250000, used 1.000000
GPU-B  time-sliced x4: search/a holds 2 replicas, search/b 1, one unheld (equal policy);
       no pod labels: the namespace's team label applies -> a 1.250000, b 0.625000
GPU-C  ml/g (team nlp) holds it, but every series has a 20-minute gap 05:20-05:40
       -> allocated 2.50 x 40/60 = 1.666667; the GPU existed all hour
idle (separate) = 1.25 + 0.625 + 0.833333 = 2.708333; fleet = 3 x 2.50 = 7.500000

hour 06:00: MIG 3g+2g+1g+1g on node pool mig-pool, a spot H100, a pod relabelled mid-hour
(test_mig_layout_and_node_pools)

hour 07:00 (test_scenarios.py)
GPU-7  H100 as 7 x 1g.10gb: team a holds 3, b 2, c 1, one unheld: 2.50 x 6/7 = 2142857 split
       in six equal parts of 357142.857: five get 357143 (canonical order: a1 a2 a3 b1 b2),
       c1 357142 -> a 1071429, b 714286, c 357142, idle 357143
GPU-U  scratch/orphan: no pod or namespace labels -> __unallocated__ 2.500000
GPU-N  scratch/n (team nolist) 07:00-07:30, no gpu_device_up: the GPU existed while held
       -> cost 1.250000, all allocated
GPU-D  drv/d (team drv), driver upgraded at 07:30 (new label, new series): one GPU, 2.500000
GPU-W  shared/w in cluster c1 (no cluster label: the configured one) -> c1-team 2.500000
GPU-X  shared/w in cluster c2 (cluster="c2")                          -> c2-team 2.500000

2026-11-11 09:00: pods evil/p0..p7 on GPU-H0..H7, one per HOSTILE team label (test_api.py)

2026-11-15 11:00-13:00: finance/q (team fin) holds GPU-Q; a price change at 12:00
(test_reprice.py)

2026-11-12 08:00: GPU-L, nobody's, from an exporter that writes dcgm-exporter main's
`hostname` label instead of `Hostname` (test_ingest.py)
"""

from __future__ import annotations

import dataclasses
import gc
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine

from costsvc.db.migrate import upgrade
from costsvc.ingest.prom import PrometheusReader
from costsvc.ingest.reader import Counts
from costsvc.ingest.run import ingest
from costsvc.rules.cost_model import CostModel, parse
from tests.costsvc.history_checks import tables
from tests.costsvc.history_fractional import add_history as add_fractional_history

HOUR = datetime(2026, 11, 10, 5, tzinfo=UTC)
T0 = int(HOUR.timestamp())
HOUR2 = datetime(2026, 11, 10, 6, tzinfo=UTC)
T1 = int(HOUR2.timestamp())
HOUR3 = datetime(2026, 11, 10, 7, tzinfo=UTC)
T2 = int(HOUR3.timestamp())
ELEVENTH = datetime(2026, 11, 11, 9, tzinfo=UTC)
T11 = int(ELEVENTH.timestamp())
HOSTILE = [
    '=HYPERLINK("x")',
    "@SUM(1)",
    "+1",
    "-1",
    'a,b "q"\nline two',
    "\tTab",
    "チーム é",
    "back\\slash",
]
TWELFTH = datetime(2026, 11, 12, 8, tzinfo=UTC)
T12 = int(TWELFTH.timestamp())
FIFTEENTH = datetime(2026, 11, 15, 11, tzinfo=UTC)
T15 = int(FIFTEENTH.timestamp())
H100 = "NVIDIA H100 80GB HBM3"


def model(price: str = "2.50", **policies: str) -> CostModel:
    return parse(
        {
            "policies": policies,
            "versions": [
                {
                    "effective_from": "2026-11-01T00:00:00Z",
                    "prices": [{"model": H100, "hourly": price}],
                }
            ],
        }
    )


MODEL = model()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def series(name: str, labels: dict[str, str], value: float, start: int, stop: int) -> list[str]:
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return [f"{name}{{{text}}} {value} {t}" for t in range(start, stop, 15)]


def gpu_labels(uuid: str) -> dict[str, str]:
    return {"gpu": "0", "UUID": uuid, "modelName": H100, "Hostname": f"node-{uuid[-1]}"}


def history() -> str:
    fam: dict[str, list[str]] = {}

    def add(name: str, labels: dict[str, str], value: float, start: int, stop: int) -> None:
        fam.setdefault(name, []).extend(series(name, labels, value, start, stop))

    before, end = T0 - 60, T0 + 3600
    for uuid in ("GPU-A", "GPU-B"):
        add("gpu_device_up", gpu_labels(uuid), 1, before, end)
    a = gpu_labels("GPU-A")
    add(
        "gpu_allocation_share",
        {**a, "namespace": "ml", "pod": "p", "container": "main", "resource": "nvidia.com/gpu"},
        1,
        T0,
        T0 + 1800,
    )
    add("DCGM_FI_DEV_GPU_UTIL", a, 80, before, end)
    b = gpu_labels("GPU-B")
    for pod, share, sm in (("a", 0.5, 0.3), ("b", 0.25, 0.1)):
        holder = {**b, "namespace": "search", "pod": pod, "container": "main"}
        add(
            "gpu_allocation_share",
            {**holder, "resource": "nvidia.com/gpu.shared"},
            share,
            before,
            end,
        )
        add("gpu_container_sm_utilization_ratio", holder, sm, before, end)
    c = gpu_labels("GPU-C")
    for start, stop in ((before, T0 + 1200), (T0 + 2400, end)):  # a 20-minute gap
        add("gpu_device_up", c, 1, start, stop)
        add(
            "gpu_allocation_share",
            {**c, "namespace": "ml", "pod": "g", "container": "main", "resource": "nvidia.com/gpu"},
            1,
            start,
            stop,
        )
    for pod in ("p", "g"):
        labels = {
            "namespace": "ml",
            "pod": pod,
            "label_team": "nlp",
            "label_project": "llm",
            "label_stage": "prod",
        }
        add("kube_pod_labels", labels, 1, before, end)
    add("kube_namespace_labels", {"namespace": "search", "label_team": "search"}, 1, before, end)
    # the pods' owners as kube-state-metrics exports them (docs/pod-metrics.md etc.: one
    # series per owner, "<none>" for an object without): ml/p a Deployment's through its
    # ReplicaSet, ml/g a StatefulSet's, search/a a CronJob's through its Job, search/b none
    for ns, pod, kind, name in (
        ("ml", "p", "ReplicaSet", "trainer-7c9d8b6f5d"),
        ("ml", "g", "StatefulSet", "gen"),
        ("search", "a", "Job", "nightly-29400000"),
        ("search", "b", "<none>", "<none>"),
    ):
        is_controller = "<none>" if kind == "<none>" else "true"
        owner = {"namespace": ns, "pod": pod, "uid": f"u-{pod}", "owner_kind": kind}
        owner |= {"owner_name": name, "owner_is_controller": is_controller}
        add("kube_pod_owner", owner, 1, before, end)
    rs = {"namespace": "ml", "replicaset": "trainer-7c9d8b6f5d", "owner_kind": "Deployment"}
    rs |= {"owner_name": "trainer", "owner_is_controller": "true"}
    add("kube_replicaset_owner", rs, 1, before, end)
    job = {"namespace": "search", "job_name": "nightly-29400000", "owner_kind": "CronJob"}
    job |= {"owner_name": "nightly", "owner_is_controller": "true"}
    add("kube_job_owner", job, 1, before, end)

    # hour 06:00: a MIG H100 on node pool "mig-pool" (7.00/h) as 3g.40gb + 2g.20gb + 2 x 1g.10gb
    # (x holds GI 2 and 9, y holds GI 3, GI 10 unheld), and a spot H100 (2.50 - 60 % = 1.00)
    s1, e1 = T1, T1 + 3600  # nothing of it may fall into the 05:00 hour
    m = {**gpu_labels("GPU-M"), "node_pool": "mig-pool"}
    add("gpu_device_up", m, 1, s1, e1)
    layout = (
        ("2", "3g.40gb", 3, 4, "x"),
        ("3", "2g.20gb", 2, 2, "y"),
        ("9", "1g.10gb", 1, 1, "x2"),
        ("10", "1g.10gb", 1, 1, None),
    )
    for gi, profile, compute, memory, pod in layout:
        inst = {**gpu_labels("GPU-M"), "GPU_I_ID": gi, "GPU_I_PROFILE": profile}
        add(
            "gpu_mig_instance_info",
            {**inst, "compute_slices": str(compute), "memory_slices": str(memory)},
            1,
            s1,
            e1,
        )
        if pod:
            holder = {
                **inst,
                "namespace": "mig",
                "pod": pod,
                "container": "main",
                "resource": f"nvidia.com/mig-{profile}",
            }
            add("gpu_allocation_share", holder, compute / 7, s1, e1)
            add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", inst, 0.5, s1, e1)
    spot = {**gpu_labels("GPU-S"), "node_pool": "spot"}
    add("gpu_device_up", spot, 1, s1, e1)
    add(
        "gpu_allocation_share",
        {**spot, "namespace": "mig", "pod": "z", "container": "main", "resource": "nvidia.com/gpu"},
        1,
        s1,
        e1,
    )
    for pod, team in (("x", "x"), ("x2", "x"), ("y", "y"), ("z", "z")):
        add("kube_pod_labels", {"namespace": "mig", "pod": pod, "label_team": team}, 1, s1, e1)
    # GPU-R is held by mig/r, relabelled from team "before" to "after" at 06:30: the labels it
    # had last in the hour decide
    r = gpu_labels("GPU-R")
    add("gpu_device_up", r, 1, s1, e1)
    add(
        "gpu_allocation_share",
        {**r, "namespace": "mig", "pod": "r", "container": "main", "resource": "nvidia.com/gpu"},
        1,
        s1,
        e1,
    )
    add(
        "kube_pod_labels",
        {"namespace": "mig", "pod": "r", "label_team": "before"},
        1,
        s1,
        T1 + 1800,
    )
    add(
        "kube_pod_labels", {"namespace": "mig", "pod": "r", "label_team": "after"}, 1, T1 + 1800, e1
    )
    # hour 07:00 (see the module docstring): an H100 as 7 x 1g.10gb shared by three teams, an
    # unlabelled pod, a GPU held but missing from gpu_device_up, a driver upgrade mid-hour, and
    # the same namespace/pod name in two clusters with different teams
    s2, e2 = T2, T2 + 3600
    seven = gpu_labels("GPU-7")
    add("gpu_device_up", seven, 1, s2, e2)
    holders = {"8": "a1", "9": "a2", "10": "a3", "11": "b1", "12": "b2", "13": "c1", "14": None}
    for gi, pod in holders.items():
        inst = {**seven, "GPU_I_ID": gi, "GPU_I_PROFILE": "1g.10gb"}
        add(
            "gpu_mig_instance_info",
            {**inst, "compute_slices": "1", "memory_slices": "1"},
            1,
            s2,
            e2,
        )
        if pod:
            holder = {
                **inst,
                "namespace": "mig7",
                "pod": pod,
                "container": "main",
                "resource": "nvidia.com/mig-1g.10gb",
            }
            add("gpu_allocation_share", holder, 1 / 7, s2, e2)
            add(
                "kube_pod_labels",
                {"namespace": "mig7", "pod": pod, "label_team": pod[0]},
                1,
                s2,
                e2,
            )
    u = gpu_labels("GPU-U")
    add("gpu_device_up", u, 1, s2, e2)
    add(
        "gpu_allocation_share",
        {
            **u,
            "namespace": "scratch",
            "pod": "orphan",
            "container": "main",
            "resource": "nvidia.com/gpu",
        },
        1,
        s2,
        e2,
    )
    n = gpu_labels("GPU-N")  # no gpu_device_up at all; held 07:00-07:30
    add(
        "gpu_allocation_share",
        {
            **n,
            "namespace": "scratch",
            "pod": "n",
            "container": "main",
            "resource": "nvidia.com/gpu",
        },
        1,
        s2,
        s2 + 1800,
    )
    add("kube_pod_labels", {"namespace": "scratch", "pod": "n", "label_team": "nolist"}, 1, s2, e2)
    for driver, start, stop in (("550.54.15", s2, s2 + 1800), ("560.35.03", s2 + 1800, e2)):
        d = {**gpu_labels("GPU-D"), "DCGM_FI_DRIVER_VERSION": driver}
        add("gpu_device_up", d, 1, start, stop)
        add(
            "gpu_allocation_share",
            {
                **d,
                "namespace": "drv",
                "pod": "d",
                "container": "main",
                "resource": "nvidia.com/gpu",
            },
            1,
            start,
            stop,
        )
    add("kube_pod_labels", {"namespace": "drv", "pod": "d", "label_team": "drv"}, 1, s2, e2)
    for uuid, cluster in (("GPU-W", None), ("GPU-X", "c2")):
        g = {**gpu_labels(uuid), **({"cluster": cluster} if cluster else {})}
        add("gpu_device_up", g, 1, s2, e2)
        add(
            "gpu_allocation_share",
            {
                **g,
                "namespace": "shared",
                "pod": "w",
                "container": "main",
                "resource": "nvidia.com/gpu",
            },
            1,
            s2,
            e2,
        )
        where = {"cluster": cluster} if cluster else {}
        add(
            "kube_pod_labels",
            {**where, "namespace": "shared", "pod": "w", "label_team": f"{cluster or 'c1'}-team"},
            1,
            s2,
            e2,
        )

    # 2026-11-12 08:00: an idle GPU whose exporter writes the host label as "hostname"
    lower = {k: v for k, v in gpu_labels("GPU-L").items() if k != "Hostname"}
    add("gpu_device_up", {**lower, "hostname": "node-lower"}, 1, T12, T12 + 3600)

    # 2026-11-15 11:00-13:00: finance/q (team fin) holds GPU-Q; the price changes at 12:00
    q = gpu_labels("GPU-Q")
    add("gpu_device_up", q, 1, T15, T15 + 7200)
    add(
        "gpu_allocation_share",
        {
            **q,
            "namespace": "finance",
            "pod": "q",
            "container": "main",
            "resource": "nvidia.com/gpu",
        },
        1,
        T15,
        T15 + 7200,
    )
    add(
        "kube_pod_labels",
        {"namespace": "finance", "pod": "q", "label_team": "fin"},
        1,
        T15,
        T15 + 7200,
    )

    # 2026-11-11 09:00: hostile label values (untrusted: they must come out safe everywhere)
    for i, team in enumerate(HOSTILE):
        h = gpu_labels(f"GPU-H{i}")
        add("gpu_device_up", h, 1, T11, T11 + 3600)
        add(
            "gpu_allocation_share",
            {
                **h,
                "namespace": "evil",
                "pod": f"p{i}",
                "container": "main",
                "resource": "nvidia.com/gpu",
            },
            1,
            T11,
            T11 + 3600,
        )
        add(
            "kube_pod_labels",
            {"namespace": "evil", "pod": f"p{i}", "label_team": team, "label_project": team[::-1]},
            1,
            T11,
            T11 + 3600,
        )
    add_fractional_history(add)  # 2026-11-16 10:00: DRA and HAMi (history_fractional.py)
    out = []
    for name, lines in fam.items():
        out.append(f"# TYPE {name} gauge")
        out.extend(lines)
    out.append("# EOF")
    return "\n".join(out) + "\n"


def ingest_with(
    prom_url: str,
    db_url: str,
    cost_model: CostModel,
    hours: list[datetime],
    cluster: str = "c1",
    source: str = "auto",
    raw_only: bool = False,
) -> Counts:
    """Ingest ``hours``; how many series the reads synthesised (fast) and read raw
    (``raw_only``: the gauges read sample by sample, to check their summaries)."""
    upgrade(db_url)
    engine = create_engine(db_url)
    reader = PrometheusReader(prom_url, raw_only=raw_only)
    try:
        report = ingest(engine, reader, cost_model, cluster, hours, source=source)
        assert report.done == hours, report.failed
        return dataclasses.replace(report.reads)
    finally:
        reader.close()
        engine.dispose()


def assert_fast_is_raw(
    prom_url: str,
    urls: tuple[str, str, str],
    cost_model: CostModel,
    runs: list[tuple[list[datetime], str]],
) -> tuple[Counts, Counts]:
    """Every row of every money, energy and fact table is the same whether the reads are
    fast (steady series synthesised from summaries: costsvc/ingest/gauges/steady.py) or raw: the
    ``runs`` (hours, source) ingested raw into ``urls[0]``, fast in one run each into
    ``urls[1]`` (consecutive hours share a block of summaries) and fast hour by hour into
    ``urls[2]``. Returns the fast and the raw counts of the first fast ingest."""
    raw, fast = Counts(), Counts()
    for hours, source in runs:
        got = ingest_with(prom_url, urls[0], cost_model, hours, source=source, raw_only=True)
        raw.fast += got.fast
        raw.raw += got.raw
        got = ingest_with(prom_url, urls[1], cost_model, hours, source=source)
        fast.fast += got.fast
        fast.raw += got.raw
        fast.summed += got.summed
        fast.loaded += got.loaded
        for hour in hours:
            ingest_with(prom_url, urls[2], cost_model, [hour], source=source)
    assert raw.fast == 0 and raw.raw > 0
    expected = tables(urls[0])
    assert all(expected), expected  # every table has rows
    assert tables(urls[1]) == expected
    assert tables(urls[2]) == expected
    return fast, raw


def unreachable_after_ingest(
    prom_url: str, tmp: Path, hours: list[datetime], kind: type, source: str = "auto"
) -> int:
    """Ingest ``hours`` (fast reads, SQLite) with the cyclic garbage collector paused, as
    ``gpu-costsvc ingest`` runs; how many objects of ``kind`` the collector then finds
    unreachable (kept alive only by reference cycles). A control: a fresh cycle is found."""
    found = 0
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        ingest_with(prom_url, f"sqlite:///{tmp / 'cycles.db'}", model(), hours, source=source)
        control: list[object] = []
        control.append(control)
        del control
        gc.collect()
        found = sum(isinstance(o, kind) for o in gc.garbage)
        assert any(isinstance(o, list) and o and o[0] is o for o in gc.garbage)  # the control
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    return found
