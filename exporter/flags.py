"""``gpu-exporter``'s flags, parsed into :class:`Settings`, with the start-up checks on them.

Every flag has an environment twin: ``--web.listen-address`` is ``GPU_EXPORTER_WEB_LISTEN_ADDRESS``,
``--collector.nvlink`` is ``GPU_EXPORTER_COLLECTOR_NVLINK=true|false``. A flag given on the
command line wins over its twin. A bad flag, value or spec file exits 2 with one line that
names it.
"""

from __future__ import annotations

import argparse
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from exporter import __version__
from exporter.catalogue import COLLECTORS, OFF_BY_DEFAULT
from exporter.http import parse_listen_address
from exporter.pods.kubelet.client import DEFAULT_SOCKET
from exporter.render.label_text import HOSTNAME_LABELS

PROG = "gpu-exporter"
ENV_PREFIX = "GPU_EXPORTER_"
LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class UsageError(Exception):
    """A start-up problem the user must fix; exit status 2."""


@dataclass(frozen=True)
class Settings:
    listen_address: str
    collect_interval: float
    simulate: Path | None
    hostname: str | None
    log_level: str
    collectors: frozenset[str]
    pod_resources_socket: str = DEFAULT_SOCKET
    pod_resources_timeout: float = 2.0
    resource_names: tuple[str, ...] = ()
    vgpu_profiles: tuple[str, ...] = ()  # RESOURCE=MiB (memory-profile vGPU resources)
    procfs: str = "/proc"
    pod_labels: tuple[str, ...] = ()
    kube_node_name: str | None = None
    kubeconfig: str | None = None
    kube_api_url: str | None = None
    hostname_label: str = "Hostname"
    web_config_file: Path | None = None


def parse_duration(text: str) -> float:
    """Prometheus-style durations: ``5s``, ``500ms``, ``1m``; a bare number is seconds."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration like 5s, 500ms or 1m")
    seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    if not 0.05 <= seconds <= 3600:
        raise ValueError(f"{text!r} must be between 50ms and 1h")
    return seconds


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").upper().replace(".", "_").replace("-", "_")


def _bool_env(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise UsageError(f"{name}={value!r}: expected true or false")


def build_parser() -> argparse.ArgumentParser:
    """The flags, in the order ``--help`` lists them."""
    p = _Parser(
        prog=PROG,
        description="DCGM-compatible NVIDIA GPU exporter for Prometheus.",
        epilog="Every flag has an environment twin: GPU_EXPORTER_ + the flag name in capitals "
        "with dots and dashes as underscores.",
    )
    _serving_flags(p)
    _pod_flags(p)
    _kubernetes_flags(p)
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _collector_flags(p)
    return p


def _serving_flags(p: argparse.ArgumentParser) -> None:
    """Where and how often: the listen address and its TLS, the collection interval, the
    simulated fleet, the host label, the log level."""
    p.add_argument(
        "--web.listen-address",
        dest="listen_address",
        default=":9400",
        help="address to serve /metrics on (default :9400)",
    )
    p.add_argument(
        "--web.config.file",
        dest="web_config_file",
        default=None,
        help="TLS and basic authentication, in the Prometheus exporter-toolkit's format "
        "(as node_exporter reads it; docs/deploy.md)",
    )
    p.add_argument(
        "--collect-interval",
        dest="collect_interval",
        default="5s",
        help="how often to read the GPUs, e.g. 5s, 500ms (default 5s)",
    )
    p.add_argument(
        "--simulate",
        metavar="FILE",
        default=None,
        help="run over a fake NVML driven by this fleet spec (YAML)",
    )
    p.add_argument(
        "--hostname",
        default=None,
        help="value of the Hostname label (default: the spec's, $NODE_NAME, "
        "or this machine's host name)",
    )
    p.add_argument(
        "--hostname-label",
        dest="hostname_label",
        default="Hostname",
        help="name of the host label: Hostname (dcgm-exporter's releases, the default) or "
        "hostname (dcgm-exporter's main branch)",
    )
    p.add_argument("--log-level", dest="log_level", default="info", choices=sorted(LOG_LEVELS))


def _pod_flags(p: argparse.ArgumentParser) -> None:
    """Who holds which GPU: the kubelet's pod-resources socket, the GPU resources it names,
    the host's /proc (a process's container)."""
    p.add_argument(
        "--pod-resources-socket",
        dest="pod_resources_socket",
        default=DEFAULT_SOCKET,
        help="the kubelet's pod-resources socket (who holds which GPU)",
    )
    p.add_argument(
        "--pod-resources-timeout",
        dest="pod_resources_timeout",
        default="2s",
        help="time-out of each pod-resources call (default 2s)",
    )
    p.add_argument(
        "--pod-resources.resource-names",
        dest="resource_names",
        default="",
        help="extra extended-resource names (comma-separated, * allowed) that are "
        "GPUs, besides nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-*",
    )
    p.add_argument(
        "--pod-resources.vgpu-profiles",
        dest="vgpu_profiles",
        default="",
        help="memory-profile vGPU resources as RESOURCE=MiB (comma-separated, e.g. "
        "nvidia.com/vgpu-8g=8192): a device of that resource holds that much of its GPU",
    )
    p.add_argument(
        "--path.procfs",
        dest="procfs",
        default="/proc",
        help="where the host's /proc is mounted (PID to container mapping)",
    )


def _kubernetes_flags(p: argparse.ArgumentParser) -> None:
    """The Kubernetes API: the pod labels copied onto per-pod series, this node, how to reach
    the API server."""
    p.add_argument(
        "--kubernetes.pod-labels",
        dest="pod_labels",
        default="",
        help="pod labels to add to per-pod series, e.g. team,project,stage (as label_team, ...)",
    )
    p.add_argument(
        "--kubernetes.node-name",
        dest="kube_node_name",
        default=None,
        help="this node's name in Kubernetes (default: $NODE_NAME, else the host name)",
    )
    p.add_argument(
        "--kubernetes.kubeconfig",
        dest="kubeconfig",
        default=None,
        help="kubeconfig file (default: in-cluster configuration when in a pod)",
    )
    p.add_argument(
        "--kubernetes.api-url",
        dest="kube_api_url",
        default=None,
        help="talk to this API server URL without credentials (kubectl proxy)",
    )


def _collector_flags(p: argparse.ArgumentParser) -> None:
    """``--collector.<name>`` and its hidden ``--no-collector.<name>`` for each collector."""
    for name in COLLECTORS:
        group = p.add_mutually_exclusive_group()
        group.add_argument(
            f"--collector.{name}",
            dest=f"collector_{name}",
            action="store_true",
            default=None,
            help=f"enable the {name} collector (default: "
            f"{'off' if name in OFF_BY_DEFAULT else 'on'})",
        )
        group.add_argument(
            f"--no-collector.{name}",
            dest=f"collector_{name}",
            action="store_false",
            help=argparse.SUPPRESS,
        )


# what simulate mode provides itself (its kubelet server, /proc tree and pod directory:
# exporter/simulate/node.py), so these flags would be ignored there
_SIMULATED = (
    ("pod-resources-socket", "pod_resources_socket"),
    ("path.procfs", "procfs"),
    ("kubernetes.node-name", "kube_node_name"),
    ("kubernetes.kubeconfig", "kubeconfig"),
    ("kubernetes.api-url", "kube_api_url"),
)


def _simulate_alone(args: argparse.Namespace) -> None:
    """``--simulate`` with a flag that points at a real node's parts: a start-up error naming
    them, never a flag ignored in silence."""
    if not args.simulate:
        return
    plain = build_parser()  # the defaults, before the environment twins set theirs
    given = [
        f"--{flag}" for flag, dest in _SIMULATED if getattr(args, dest) != plain.get_default(dest)
    ]
    if given:
        raise UsageError(
            f"--simulate runs its own kubelet, /proc and pods: {', '.join(given)} cannot be "
            "used with it"
        )


def parse_settings(argv: list[str], environ: dict[str, str]) -> Settings:
    parser = build_parser()
    defaults: dict[str, Any] = {}
    for flag, dest in (
        ("web.listen-address", "listen_address"),
        ("web.config.file", "web_config_file"),
        ("collect-interval", "collect_interval"),
        ("simulate", "simulate"),
        ("hostname", "hostname"),
        ("hostname-label", "hostname_label"),
        ("log-level", "log_level"),
        ("pod-resources-socket", "pod_resources_socket"),
        ("pod-resources-timeout", "pod_resources_timeout"),
        ("pod-resources.resource-names", "resource_names"),
        ("pod-resources.vgpu-profiles", "vgpu_profiles"),
        ("path.procfs", "procfs"),
        ("kubernetes.pod-labels", "pod_labels"),
        ("kubernetes.node-name", "kube_node_name"),
        ("kubernetes.kubeconfig", "kubeconfig"),
        ("kubernetes.api-url", "kube_api_url"),
    ):
        value = environ.get(env_name(flag))
        if value is not None:
            defaults[dest] = value
    for name in COLLECTORS:
        key = env_name(f"collector.{name}")
        if key in environ:
            defaults[f"collector_{name}"] = _bool_env(key, environ[key])
    parser.set_defaults(**defaults)
    args = parser.parse_args(argv)

    if args.hostname_label not in HOSTNAME_LABELS:
        raise UsageError(f"--hostname-label {args.hostname_label!r}: choose Hostname or hostname")
    if args.log_level not in LOG_LEVELS:
        raise UsageError(f"--log-level {args.log_level!r}: choose from {', '.join(LOG_LEVELS)}")
    try:
        interval = parse_duration(args.collect_interval)
    except ValueError as exc:
        raise UsageError(f"--collect-interval: {exc}") from None
    try:
        pr_timeout = parse_duration(args.pod_resources_timeout)
    except ValueError as exc:
        raise UsageError(f"--pod-resources-timeout: {exc}") from None
    try:
        parse_listen_address(args.listen_address)
    except ValueError as exc:
        raise UsageError(f"--web.listen-address: {exc}") from None
    _simulate_alone(args)
    collectors = frozenset(
        name
        for name in COLLECTORS
        if getattr(args, f"collector_{name}") is True
        or (getattr(args, f"collector_{name}") is None and name not in OFF_BY_DEFAULT)
    )
    return Settings(
        listen_address=args.listen_address,
        collect_interval=interval,
        simulate=Path(args.simulate) if args.simulate else None,
        hostname=args.hostname,
        log_level=args.log_level,
        collectors=collectors,
        pod_resources_socket=args.pod_resources_socket,
        pod_resources_timeout=pr_timeout,
        resource_names=tuple(n.strip() for n in args.resource_names.split(",") if n.strip()),
        vgpu_profiles=tuple(n.strip() for n in args.vgpu_profiles.split(",") if n.strip()),
        procfs=args.procfs,
        pod_labels=tuple(k.strip() for k in args.pod_labels.split(",") if k.strip()),
        kube_node_name=args.kube_node_name,
        kubeconfig=args.kubeconfig,
        kube_api_url=args.kube_api_url,
        hostname_label=args.hostname_label,
        web_config_file=Path(args.web_config_file) if args.web_config_file else None,
    )
