"""A kubelet pod-resources v1 server on a unix socket, answering from a fleet spec.

Simulate mode runs it so the exporter's real gRPC client and attribution run unchanged; the
tests use it (and its ``delay`` and ``old_kubelet`` knobs) as the real server the client talks
to.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from exporter.pods.kubelet import api_pb2, api_pb2_grpc
from exporter.simulate.pods import (
    PodSpec,
    dra_device_name,
    referenced_gpu,
    resolve_device_id,
)
from exporter.simulate.spec import SimGpu

DraDevice = tuple[str, str, str]  # driver, pool, device


@dataclass(frozen=True)
class PodAnswer:
    namespace: str
    name: str
    # container name -> [(resource, [device ids])]
    containers: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)
    # container name -> [(claim namespace, claim name, [(driver, pool, device)])]
    claims: dict[str, list[tuple[str, str, list[DraDevice]]]] = field(default_factory=dict)


Answer = tuple[list[PodAnswer], list[tuple[str, list[str]]]]  # pods, allocatable


class KubeletServicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, answer: Callable[[], Answer]) -> None:
        self.answer = answer
        self.delay = 0.0  # seconds to stall before answering (a slow kubelet)
        self.old_kubelet = False  # answer GetAllocatableResources UNIMPLEMENTED (< 1.21)
        self.no_dra = False  # send no dynamic_resources (a kubelet before 1.27, or gate off)
        self.calls = 0
        self._lock = threading.Lock()

    def _stall(self) -> None:
        with self._lock:
            self.calls += 1
        if self.delay:
            time.sleep(self.delay)  # the behaviour under test: a kubelet that answers late

    def List(self, request: Any, context: Any) -> Any:
        self._stall()
        pods, _ = self.answer()
        return api_pb2.ListPodResourcesResponse(
            pod_resources=[_pod(p, not self.no_dra) for p in pods]
        )

    def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        self._stall()
        if self.old_kubelet:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method")
        _, allocatable = self.answer()
        return api_pb2.AllocatableResourcesResponse(
            devices=[
                api_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in allocatable
            ]
        )


def _pod(p: PodAnswer, dra: bool = True) -> Any:
    names = list(p.containers) + [c for c in p.claims if c not in p.containers]
    return api_pb2.PodResources(
        name=p.name,
        namespace=p.namespace,
        containers=[
            api_pb2.ContainerResources(
                name=c,
                devices=[
                    api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                    for r, ids in p.containers.get(c, [])
                ],
                dynamic_resources=[
                    api_pb2.DynamicResource(
                        claim_namespace=claim_ns,
                        claim_name=claim,
                        claim_resources=[
                            api_pb2.ClaimResource(
                                driver_name=driver,
                                pool_name=pool,
                                device_name=device,
                                cdi_devices=[
                                    api_pb2.CDIDevice(name=f"k8s.{driver}/device={device}")
                                ],
                            )
                            for driver, pool, device in devices
                        ],
                    )
                    for claim_ns, claim, devices in p.claims.get(c, [])
                ]
                if dra
                else [],
            )
            for c in names
        ],
    )


def serve(socket_path: str, servicer: KubeletServicer) -> Any:
    """Start a gRPC server on ``unix://socket_path``; the caller stops it (``.stop(0)``)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    return server


def spec_answer(
    pods: list[PodSpec], gpus: list[SimGpu], sim_time: Callable[[], float], node: str = ""
) -> Answer:
    """What the kubelet of the spec's node would answer at the current simulated time."""
    uuids = [g.uuid for g in gpus]
    migs = {(g.index, m.gi_id): m.uuid for g in gpus for m in g.migs}
    t = sim_time()
    answers = []
    shared_resource: dict[int, str] = {}
    for pod in pods:
        containers: dict[str, list[tuple[str, list[str]]]] = {}
        claims: dict[str, list[tuple[str, str, list[DraDevice]]]] = {}
        for c in pod.containers:
            if c.claims:
                claims[c.name] = [
                    (
                        use.namespace or pod.namespace,
                        use.name,
                        [(use.driver, use.pool or node, dra_device_name(d)) for d in use.devices],
                    )
                    for use in c.claims
                ]
            devices = []
            if c.hami:  # HAMi's device plugin: virtual ids <GPU uuid>-<n>, one per device
                ids = [f"{uuids[int(d.gpu[3:])]}-{n}" for n, d in enumerate(c.hami)]
                devices.append(("nvidia.com/gpu", ids))
            for claim in c.devices:
                ids = [resolve_device_id(ref, uuids, migs) for ref in claim.ids]
                devices.append((claim.resource, ids))
                for ref in claim.ids:
                    index = referenced_gpu(ref)
                    if index is not None and "::" in ref:
                        shared_resource[index] = claim.resource
            containers[c.name] = devices
        if pod.alive(t):
            answers.append(PodAnswer(pod.namespace, pod.name, containers, claims))
    allocatable: list[tuple[str, list[str]]] = []
    for g in gpus:
        live = g.live_migs(t)
        if live:
            for m in live:
                allocatable.append((f"nvidia.com/mig-{m.profile_name}", [m.uuid]))
        elif g.spec.time_slicing_replicas:
            resource = shared_resource.get(g.index, "nvidia.com/gpu")
            ids = [f"{g.uuid}::{n}" for n in range(g.spec.time_slicing_replicas)]
            allocatable.append((resource, ids))
        else:
            allocatable.append(("nvidia.com/gpu", [g.uuid]))
    return answers, allocatable
