"""The cost service's commands, under ``gpu-costsvc`` (costsvc/cli.py)."""
