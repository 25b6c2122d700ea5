# One image for both halves: gpu-exporter (a DaemonSet on GPU nodes) and gpu-costsvc
# (`--entrypoint gpu-costsvc`, e.g. `serve`, `db upgrade`). See deploy/README.md.
FROM python:3.11-slim
WORKDIR /app
# No .pyc writes (the Kubernetes manifests mount the root file system read-only); logs unbuffered.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY costsvc ./costsvc
COPY kube ./kube
COPY examples ./examples
COPY migrations ./migrations
COPY alembic.ini ./
# Editable install: `gpu-costsvc db upgrade` finds alembic.ini and migrations/ next to the
# costsvc package (costsvc/db/migrate.py), i.e. here in /app, not in site-packages.
RUN pip install --no-cache-dir -e . && useradd --uid 10001 --no-create-home app
# Numeric, so Kubernetes can verify runAsNonRoot. The exporter's DaemonSet runs as uid 0 to
# reach the kubelet's root-only pod-resources socket (deploy/README.md).
USER 10001
# 9400: gpu-exporter /metrics and /health; 8080: gpu-costsvc API, /metrics and /healthz.
EXPOSE 9400 8080
ENTRYPOINT ["gpu-exporter"]
