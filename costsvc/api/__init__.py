"""The cost service's HTTP API (FastAPI): everything under ``/v1``, plus ``/metrics`` and
``/healthz``. ``create_app()`` builds it; ``gpu-costsvc serve`` serves it with uvicorn."""

from costsvc.api.app import create_app

__all__ = ["create_app"]
