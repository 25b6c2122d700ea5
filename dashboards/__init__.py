"""Grafana dashboards as code (grafana-foundation-sdk); `generate.py` writes the JSON."""
