"""NVIDIA dcgm-exporter + kube-state-metrics as the source, through a real
Prometheus into SQLite and PostgreSQL: whole GPUs, a 3g+2g+1g+1g MIG layout, time-slicing x 4,
a pod relabelled mid-hour, a pod that completes mid-hour, both ``Hostname`` and ``hostname``,
and a node without the Kubernetes mapping (hand-computed figures in history14.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, select

from costsvc.db.models import Chargeback, GpuPresence, UsageFact
from costsvc.ingest.gauges.dcgm import mig_slices, resource_of
from costsvc.rules.chargeback import IDLE
from costsvc.rules.mig import UnknownMigGeometry
from tests.costsvc.history import H100, ingest_with, model
from tests.costsvc.history14 import DCGM_HOUR
from tests.costsvc.history_checks import assert_every_hour_adds_up
from tests.prom import Prometheus


def by_team(url: str) -> dict[str, tuple[int, int, int, int]]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(Chargeback)).all()
    engine.dispose()
    out: dict[str, tuple[int, int, int, int]] = {}
    for r in rows:
        key = f"{IDLE}@{r.node}" if r.team == IDLE else r.team
        a, u, w, i = out.get(key, (0, 0, 0, 0))
        out[key] = (a + r.allocated, u + r.used, w + r.waste, i + r.idle)
    return out


@pytest.mark.parametrize("source", ["auto", "dcgm-exporter"])
def test_dcgm_exporter_and_kube_state_metrics(
    prometheus14: Prometheus, db_url: str, source: str
) -> None:
    ingest_with(prometheus14.url, db_url, model(), [DCGM_HOUR], source=source)
    assert by_team(db_url) == {
        # whole GPUs from dcgm-exporter's pod labels; GR_ENGINE_ACTIVE preferred to GPU_UTIL;
        # relabelled red -> blue mid-hour: the labels it had last
        "blue": (2_500_000, 1_750_000, 750_000, 0),
        "job": (1_250_000, 1_250_000, 0, 0),  # completed at 10:30
        f"{IDLE}@dgx-a": (0, 0, 0, 1_250_000),
        # MIG 3g+2g+1g+1g from GPU_I_PROFILE / GPU_I_ID, node from `hostname`
        "m3": (1_071_428, 535_714, 535_714, 0),
        "m2": (714_286, 357_143, 357_143, 0),
        "m1": (357_143, 178_572, 178_571, 0),
        f"{IDLE}@mig-node": (0, 0, 0, 357_143),
        # time-sliced x 4 over two GPUs: replicas from the node's capacity, spread over its
        # pool; efficiency unknown (neither used nor waste); the pending pod holds nothing
        "a": (625_000, 0, 0, 0),
        "b": (1_250_000, 0, 0, 0),
        f"{IDLE}@ts-node": (0, 0, 0, 3_125_000),
        # no pod labels on the node: the request says who holds its one GPU
        "q": (2_500_000, 1_000_000, 1_500_000, 0),
        # --kubernetes-virtual-gpus: the replica's exact GPU, and the pod's own utilisation
        "x": (625_000, 625_000, 0, 0),
        "y": (625_000, 250_000, 375_000, 0),
        f"{IDLE}@vgpu-node": (0, 0, 0, 1_250_000),
        # one DRA claim, two pods: half each, efficiency unknown
        "p1": (1_250_000, 0, 0, 0),
        "p2": (1_250_000, 0, 0, 0),
        # --use-old-namespace's `uuid`, `pod_name`, `pod_namespace`, `container_name`
        "o": (2_500_000, 2_500_000, 0, 0),
    }
    assert assert_every_hour_adds_up(db_url) == 1
    engine = create_engine(db_url)
    with engine.connect() as conn:
        gpus = {r.gpu_uuid: (r.node, r.model) for r in conn.execute(select(GpuPresence))}
        facts = {
            (r.gpu_uuid, r.gi_id, r.pod): (r.share_us, r.compute_slices, r.memory_slices)
            for r in conn.execute(select(UsageFact))
        }
    engine.dispose()
    assert gpus == {
        "GPU-DA0": ("dgx-a", H100),
        "GPU-DA1": ("dgx-a", H100),
        "GPU-DM": ("mig-node", H100),
        "GPU-DT0": ("ts-node", H100),
        "GPU-DT1": ("ts-node", H100),
        "GPU-DP": ("plain-node", H100),
        "GPU-DV": ("vgpu-node", H100),
        "GPU-DD": ("dra-node", H100),
        "GPU-DO": ("old-node", H100),
    }
    # the documented approximation: a replica's exact GPU is unknown, so ts/a holds 1/8 of
    # each GPU of the pool for the hour (our exporter: 1/4 of the one it was given)
    assert facts[("GPU-DT0", -1, "a")][0] == facts[("GPU-DT1", -1, "a")][0] == 450_000_000
    assert facts[("GPU-DM", 1, "m3")] == (1_542_857_143, 3, 4)
    assert facts[("GPU-DM", 13, "m1")] == (514_285_714, 1, 1)
    assert ("GPU-DA1", -1, "job") in facts and ("GPU-DT0", -1, "c") not in facts
    # the pods' controllers from kube-state-metrics' owner series (kube_pod_owner -> Job ->
    # kube_job_owner -> CronJob); none known for the others
    engine = create_engine(db_url)
    with engine.connect() as conn:
        c = Chargeback
        found = set(conn.execute(select(c.pod, c.controller_kind, c.controller).distinct()))
    engine.dispose()
    assert ("job", "CronJob", "nightly") in found
    assert {k for p, k, _ in found if p != "job"} == {""}


def test_our_exporter_ignores_dcgm_hours(prometheus14: Prometheus, db_url: str) -> None:
    # told to read our exporter only, an hour with dcgm-exporter's series has no GPUs
    ingest_with(prometheus14.url, db_url, model(), [DCGM_HOUR], source="gpu-exporter")
    assert by_team(db_url) == {}


@pytest.mark.parametrize(
    ("profile", "gpu", "slices"),
    [
        ("3g.40gb", H100, (3, 4, 7, 8)),
        ("1g.10gb", H100, (1, 1, 7, 8)),
        ("1g.20gb", "NVIDIA A100-SXM4-80GB", (1, 2, 7, 8)),
        ("1g.10gb", "NVIDIA A100-SXM4-40GB", (1, 2, 7, 8)),  # the GPU's memory decides
        ("3g.71gb", "NVIDIA H200", (3, 4, 7, 8)),
        ("1g.12gb", "NVIDIA H100 NVL", (1, 1, 7, 8)),
        ("7g.141gb", "NVIDIA H200", (7, 8, 7, 8)),
        ("1g.6gb", "NVIDIA A30", (1, 1, 4, 4)),  # 1 of 4, not of 7
        ("2g.12gb+me", "NVIDIA A30", (2, 2, 4, 4)),
        ("2g.20gb", "Some GPU", None),  # a model nobody knows: flagged, never guessed
        ("weird", H100, None),
    ],
)
def test_mig_slices_from_the_per_model_table(
    profile: str, gpu: str, slices: tuple[int, int, int, int] | None
) -> None:
    if slices is None:
        with pytest.raises(UnknownMigGeometry, match=r"(never|not) guessed"):
            mig_slices(profile, gpu)
        return
    compute, memory, geometry = mig_slices(profile, gpu)
    assert (compute, memory, *geometry) == slices


def test_names() -> None:
    assert resource_of("1g.10gb+me") == "nvidia_com_mig_1g_10gb_me"
