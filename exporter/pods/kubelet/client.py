"""A client for the kubelet's pod-resources v1 API on its unix socket.

Called once per collection, never from the scrape path, with a time-out on every call. A
failure is an outcome (``Unavailable``, ``TimedOut``, ``Failed``), never an exception into the
collection loop; after one the channel is rebuilt, so a restarted kubelet is picked up at once
rather than after gRPC's reconnect back-off.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import grpc

from exporter.pods.kubelet import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ContainerClaimDevice:
    """One device a container holds through a DRA resource claim (``dynamic_resources``)."""

    namespace: str
    pod: str
    container: str
    claim_namespace: str
    claim: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class Listing:
    """One List answer: device-plugin devices and DRA claim devices of every container."""

    devices: list[ContainerDevices]
    claimed: list[ContainerClaimDevice]


@dataclass(frozen=True, slots=True)
class CallFailure:
    kind: str  # "unavailable" | "timeout" | "unimplemented" | "other"
    detail: str


class PodResourcesClient:
    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 2.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel: Any = None
        self._stub: Any = None

    def _lister(self) -> Any:
        if self._stub is None:
            self._channel = grpc.insecure_channel(f"unix://{os.path.abspath(self.socket_path)}")
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]
        return self._stub

    def _call(self, method: str, request: Any) -> Any:
        if not os.path.exists(self.socket_path):
            return CallFailure("unavailable", f"{self.socket_path} does not exist")
        try:
            return getattr(self._lister(), method)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            self.close()  # start afresh next time
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return CallFailure("timeout", f"{method}: no answer within {self.timeout:g}s")
            if code == grpc.StatusCode.UNAVAILABLE:
                return CallFailure("unavailable", f"{method}: {exc.details()}")
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return CallFailure("unimplemented", f"{method}: not served by this kubelet")
            return CallFailure("other", f"{method}: {code}: {exc.details()}")

    def containers(self) -> list[ContainerDevices] | CallFailure:
        """Every container's GPU-or-other device ids (the List call)."""
        listed = self.listing()
        return listed if isinstance(listed, CallFailure) else listed.devices

    def listing(self) -> Listing | CallFailure:
        """Every container's device-plugin devices and DRA claim devices (one List call; a
        kubelet that sends no ``dynamic_resources`` gives none)."""
        answer = self._call("List", api_pb2.ListPodResourcesRequest())
        if isinstance(answer, CallFailure):
            return answer
        devices, claimed = [], []
        for pod in answer.pod_resources:
            for c in pod.containers:
                for d in c.devices:
                    devices.append(
                        ContainerDevices(
                            pod.namespace, pod.name, c.name, d.resource_name, tuple(d.device_ids)
                        )
                    )
                for dyn in c.dynamic_resources:
                    for r in dyn.claim_resources:
                        claimed.append(
                            ContainerClaimDevice(
                                pod.namespace,
                                pod.name,
                                c.name,
                                dyn.claim_namespace or pod.namespace,
                                dyn.claim_name,
                                r.driver_name,
                                r.pool_name,
                                r.device_name,
                            )
                        )
        return Listing(devices, claimed)

    def allocatable(self) -> list[tuple[str, tuple[str, ...]]] | CallFailure:
        """(resource, device ids) of every device the kubelet can hand out."""
        answer = self._call("GetAllocatableResources", api_pb2.AllocatableResourcesRequest())
        if isinstance(answer, CallFailure):
            return answer
        return [(d.resource_name, tuple(d.device_ids)) for d in answer.devices]

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = None
