"""The cost service's HTTP API (FastAPI): everything under ``/v1``, plus ``/metrics`` and
``/healthz``. ``costsvc.api.app.create_app()`` builds it; ``gpu-costsvc serve`` serves it."""
