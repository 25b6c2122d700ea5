"""A billing month's reports for finance: the chargeback CSV and FinOps FOCUS."""
