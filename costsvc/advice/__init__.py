"""Rightsizing and quotas: the PromQL reads, the rules, the figures, a run of them."""
