"""Turn the kubelet's answers into :class:`exporter.pods.claims.Assignments`.

Three ways a container holds a GPU, read side by side from one List answer:

- **device plugins** (``devices``): device ids as :mod:`exporter.pods.device_ids` parses them;
  a resource of the memory-profile table (``--pod-resources.vgpu-profiles``) holds that much
  of the GPU;
- **DRA** (``dynamic_resources``): each (driver, pool, device) of a claim is looked up in this
  node's ResourceSlices (:mod:`exporter.pods.slices`): a GPU driver's device gives its GPU or MIG
  UUID; a device of another driver is ignored, one in no slice counted, never guessed;
- **HAMi**: a listed container whose pod carries HAMi's allocation annotation holds what the
  annotation says (its kubelet device ids are HAMi's virtual ones and are not read).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from exporter.pods.claims import Assignments, Claim, ClaimRef, Holder
from exporter.pods.device_ids import (
    DEFAULT_RESOURCES,
    is_gpu_resource,
    mig_profile_key,
    parse_device_id,
)
from exporter.pods.directory import PodDirectory
from exporter.pods.fractional import HAMI_RESOURCE
from exporter.pods.kubelet.client import CallFailure, ContainerClaimDevice, PodResourcesClient
from exporter.pods.slices import GPU_DRIVERS, SliceDirectory

log = logging.getLogger(__name__)


class PodResourcesAssignments:
    """An :class:`exporter.pods.claims.AssignmentSource` over the pod-resources API."""

    def __init__(
        self,
        client: PodResourcesClient,
        on_error: Callable[[str, str], None],
        resources: tuple[str, ...] = DEFAULT_RESOURCES,
        *,
        slices: SliceDirectory | None = None,
        pods: PodDirectory | None = None,
        profiles: dict[str, int] | None = None,
        dra_drivers: tuple[str, ...] = GPU_DRIVERS,
    ) -> None:
        self._client = client
        self._on_error = on_error
        self._profiles = dict(profiles or {})
        self._resources = resources + tuple(r for r in self._profiles if r not in resources)
        self._slices = slices if slices is not None else SliceDirectory()
        self._pods = pods
        self._dra_drivers = frozenset(dra_drivers)
        self._failing = False
        self._warned_old = False
        self.problem: str | None = None

    def _failed(self, failure: CallFailure) -> None:
        self._on_error("pod_resources", failure.kind)
        if not self._failing:
            log.warning("kubelet pod-resources: %s", failure.detail)
        self._failing = True
        self.problem = f"kubelet pod-resources: {failure.detail} (pods are not attributed)"

    def assignments(self) -> Assignments | None:
        listed = self._client.listing()
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
        self.problem = None

        replicas: dict[str, int] = {}
        for resource, ids in allocatable:
            if not is_gpu_resource(resource, self._resources):
                continue
            for device_id in ids:
                ref = parse_device_id(device_id)
                if ref.key and ref.replica is not None:
                    replicas[ref.key] = replicas.get(ref.key, 0) + 1

        claims: list[Claim] = []
        hami_done: set[Holder] = set()
        for entry in listed.devices:
            if not is_gpu_resource(entry.resource, self._resources):
                continue
            holder = Holder(entry.namespace, entry.pod, entry.container)
            fractional = self._hami(holder)
            if fractional is not None:
                if holder not in hami_done:
                    hami_done.add(holder)
                    claims.extend(fractional)
                continue
            profile = self._profiles.get(entry.resource)
            for device_id in entry.device_ids:
                ref = parse_device_id(device_id)
                if profile is not None:  # its share is its profile's memory, not 1/replicas
                    claims.append(Claim(holder, entry.resource, ref.key, memory_mib=profile))
                else:
                    claims.append(Claim(holder, entry.resource, ref.key, ref.replica))
        outcomes: dict[str, int] = {}
        for device in listed.claimed:
            outcome, claim = self._dra(device)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if claim is not None:
                claims.append(claim)
        return Assignments(tuple(claims), replicas, outcomes)

    def _hami(self, holder: Holder) -> list[Claim] | None:
        """The container's HAMi allocation, None when its pod has none."""
        if self._pods is None:
            return None
        pod = self._pods.by_name(holder.namespace, holder.pod)
        if pod is None or not pod.fractional:
            return None
        return [
            Claim(holder, HAMI_RESOURCE, d.uuid, cores=d.cores, memory_mib=d.memory_mib)
            for d in pod.fractional.get(holder.container, ())
        ]

    def _dra(self, device: ContainerClaimDevice) -> tuple[str, Claim | None]:
        if device.driver not in self._dra_drivers:
            return "other_driver", None
        found = self._slices.get(device.driver, device.pool, device.device)
        if found is None:
            return "not_in_slice", None
        if found.uuid:
            key = parse_device_id(found.uuid).key
        elif found.kind == "mig" and found.parent_uuid and found.profile:
            # a partitionable (dynamic MIG) device: the slice names the partition before the
            # driver creates it; matched by its GPU and profile where that is unambiguous
            key = mig_profile_key(found.parent_uuid, found.profile)
        else:
            return "no_uuid", None
        holder = Holder(device.namespace, device.pod, device.container)
        claim = ClaimRef(device.claim_namespace, device.claim)
        return "gpu", Claim(holder, device.driver, key, claim=claim)
