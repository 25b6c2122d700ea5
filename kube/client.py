"""A CoreV1Api client, configured the way the command lines ask for it."""

from __future__ import annotations

from typing import Any


def core_api(kubeconfig: str | None = None, host: str | None = None) -> Any:
    """A CoreV1Api: in-cluster config, a kubeconfig file, or a plain URL (tests)."""
    from kubernetes import client, config

    if host is not None:
        configuration = client.Configuration()
        configuration.host = host
        return client.CoreV1Api(client.ApiClient(configuration))
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()
    return client.CoreV1Api()


def resource_api(core: Any) -> Any:
    """A ResourceV1Api (``resource.k8s.io/v1``: ResourceSlices) with ``core``'s connection."""
    from kubernetes import client

    return client.ResourceV1Api(core.api_client)


def custom_api(core: Any) -> Any:
    """A CustomObjectsApi (custom resources: Kueue's LocalQueues) with ``core``'s connection."""
    from kubernetes import client

    return client.CustomObjectsApi(core.api_client)
