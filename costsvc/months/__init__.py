"""Billing months: their states, the month close and the closed months' report hashes."""
