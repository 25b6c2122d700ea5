"""``make demo`` (``python -m demo``): the exporter and the cost service together on one
machine, with simulated GPU nodes. Neither half imports this package."""
