"""Kueue's queues as tenants: quota against use per ClusterQueue and flavor, borrowing and its
money (docs/queues.md)."""
