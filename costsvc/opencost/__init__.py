"""OpenCost's ``/allocation`` API over the chargeback tables (docs/api.md)."""
