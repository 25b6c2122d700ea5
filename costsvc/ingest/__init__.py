"""Hourly ingestion: raw samples from Prometheus -> usage facts -> chargeback."""
