"""bench/fleet.py's fleet as NVIDIA's dcgm-exporter and kube-state-metrics show it (the
``dcgm-exporter`` source): bench/rollup_scale.py ``--source dcgm-exporter``."""

from __future__ import annotations

import random

from bench.fleet import CHURN, ENERGY, H100, KSM, SEED
from bench.series import TRACKS, Grid, Spec, _const, _labels, _walks


def dcgm(gpus: int, grid: Grid, changing: bool = True, seed: int = SEED) -> list[Spec]:
    """The fleet as NVIDIA's dcgm-exporter and kube-state-metrics show it (the
    ``dcgm-exporter`` source, costsvc/ingest/gauges/dcgm.py), whole GPUs only: each GPU's
    ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_FB_USED`` carry the ``pod``/``namespace``/
    ``container`` of the pod holding it (dcgm-exporter's Kubernetes mapping: a new series at
    each change of holder, none while nobody holds it), its energy counter, ``kube_pod_labels``.
    ``changing``: the realistic fleet's utilisation walk and pod churn (module docstring); else
    one pod per GPU all along and utilisation ``40 + i % 50`` (the best case). Time-sliced and
    MIG GPUs are left out: their holders come from kube-state-metrics' requests."""
    rng = random.Random(seed)
    n = grid.n
    per_hour = 3_600_000 // grid.step_ms
    util = _walks(rng, n, "util", 0, 100, 6, 0)
    rest_rate = CHURN
    out: list[Spec] = []
    t0 = grid.start_ms
    for i in range(gpus):
        node = f"node-{i // 8}"
        labels = {
            "UUID": f"GPU-{i:05d}",
            "modelName": H100,
            "Hostname": node,
            "gpu": str(i % 8),
            "device": f"nvidia{i % 8}",
            "job": "dcgm-exporter",
            "instance": f"{node}:9400",
        }
        per_ms = 200 + i % 300
        out.append(
            Spec(
                _labels(ENERGY, labels),
                0,
                n - 1,
                lambda t, r=per_ms: float(10**12 + r * (t - t0)),
                lambda c, r=per_ms: ("energy", r, c),
            )
        )
        j, phase = rng.randrange(TRACKS), rng.randrange(util.chunks)
        team = f"team-{i % 40:02d}"
        spans: list[tuple[int, int, str | None]] = []  # (first, last, pod or None: unheld)
        if not changing:
            spans.append((0, n - 1, f"{team}-job-{i}-1"))
        else:
            k = -int(rng.expovariate(rest_rate) * per_hour)
            gen = 0
            while k < n:
                life = max(per_hour // 6, int(rng.expovariate(rest_rate) * per_hour))
                gen += 1
                first, last = max(k, 0), min(k + life - 1, n - 1)
                if last >= first:
                    spans.append((first, last, f"{team}-job-{i}-{gen}"))
                gap = int(rng.uniform(0, 10) * per_hour / 60) + 1
                if last + 1 < n and gap > 1:
                    spans.append((last + 1, min(last + gap - 1, n - 1), None))
                k += life + gap
        for first, last, pod in spans:
            who = {"namespace": team, "pod": pod, "container": "main"} if pod else {}
            stale = last < n - 1
            if changing:
                out.append(
                    util.spec(
                        grid,
                        "DCGM_FI_DEV_GPU_UTIL",
                        {**labels, **who},
                        j,
                        phase,
                        first,
                        last,
                        stale,
                    )
                )
            else:
                out.append(_const(grid, "DCGM_FI_DEV_GPU_UTIL", {**labels, **who}, 40 + i % 50))
            out.append(
                _const(grid, "DCGM_FI_DEV_FB_USED", {**labels, **who}, 30_000, first, last, stale)
            )
            if pod:
                pod_labels = {"namespace": team, "pod": pod, "label_team": team, **KSM}
                out.append(_const(grid, "kube_pod_labels", pod_labels, 1, first, last, stale))
    for k in range(-(-gpus // 8)):
        out.append(_const(grid, "up", {"job": "dcgm-exporter", "instance": f"node-{k}:9400"}, 1))
    out.append(_const(grid, "up", KSM, 1))
    return out
