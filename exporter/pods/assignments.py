"""Turn the kubelet's answers into :class:`exporter.pods.claims.Assignments`."""

from __future__ import annotations

import logging
from collections.abc import Callable

from exporter.pods.claims import Assignments, Claim, Holder
from exporter.pods.device_ids import DEFAULT_RESOURCES, is_gpu_resource, parse_device_id
from exporter.pods.kubelet.client import CallFailure, PodResourcesClient

log = logging.getLogger(__name__)


class PodResourcesAssignments:
    """An :class:`exporter.pods.claims.AssignmentSource` over the pod-resources API."""

    def __init__(
        self,
        client: PodResourcesClient,
        on_error: Callable[[str, str], None],
        resources: tuple[str, ...] = DEFAULT_RESOURCES,
    ) -> None:
        self._client = client
        self._on_error = on_error
        self._resources = resources
        self._failing = False
        self._warned_old = False

    def _failed(self, failure: CallFailure) -> None:
        self._on_error("pod_resources", failure.kind)
        if not self._failing:
            log.warning("kubelet pod-resources: %s", failure.detail)
        self._failing = True

    def assignments(self) -> Assignments | None:
        listed = self._client.containers()
        if isinstance(listed, CallFailure):
            self._failed(listed)
            return None
        allocatable = self._client.allocatable()
        if isinstance(allocatable, CallFailure):
            if allocatable.kind != "unimplemented":
                self._failed(allocatable)
                return None
            # a kubelet older than GetAllocatableResources (< 1.21): whole GPUs and MIG
            # instances still count; time-slice replicas cannot be sized, so they count as 1
            if not self._warned_old:
                log.warning(
                    "kubelet has no GetAllocatableResources: time-slice replicas are "
                    "counted as whole devices"
                )
                self._warned_old = True
            allocatable = []
        if self._failing:
            log.info("kubelet pod-resources answers again")
            self._failing = False

        replicas: dict[str, int] = {}
        for resource, ids in allocatable:
            if not is_gpu_resource(resource, self._resources):
                continue
            for device_id in ids:
                ref = parse_device_id(device_id)
                if ref.key and ref.replica is not None:
                    replicas[ref.key] = replicas.get(ref.key, 0) + 1

        claims = []
        for entry in listed:
            if not is_gpu_resource(entry.resource, self._resources):
                continue
            holder = Holder(entry.namespace, entry.pod, entry.container)
            for device_id in entry.device_ids:
                ref = parse_device_id(device_id)
                claims.append(Claim(holder, entry.resource, ref.key, ref.replica))
        return Assignments(tuple(claims), replicas)
