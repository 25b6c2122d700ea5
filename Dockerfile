# One image for both halves: gpu-exporter (a DaemonSet on GPU nodes) and gpu-costsvc.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY costsvc ./costsvc
COPY examples ./examples
COPY migrations ./migrations
COPY alembic.ini ./
RUN pip install --no-cache-dir . && useradd --uid 10001 --no-create-home app
USER 10001
EXPOSE 9400
ENTRYPOINT ["gpu-exporter"]
