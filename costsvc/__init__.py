"""gpu-costsvc: hourly GPU chargeback from Prometheus metrics, pod labels and a cost model."""

__version__ = "0.1.0"
