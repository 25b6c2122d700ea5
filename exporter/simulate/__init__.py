"""Simulate mode: a fake NVML driven by a fleet spec, and the kubelet server, /proc tree and pod
directory of a simulated node (docs/simulate.md)."""
