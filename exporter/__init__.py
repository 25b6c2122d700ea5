"""gpu-exporter: DCGM-compatible GPU metrics from NVML, with allocation and usage per pod."""

__version__ = "0.1.0"
