#!/usr/bin/env bash
# Regenerates exporter/kubelet/api_pb2*.py from api.proto (needs grpcio-tools in the venv).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m grpc_tools.protoc -I exporter/kubelet --python_out=exporter/kubelet \
  --pyi_out=exporter/kubelet --grpc_python_out=exporter/kubelet exporter/kubelet/api.proto
# the generated service module imports "api_pb2" as a top-level module; make it package-relative
sed -i 's/^import api_pb2 as api__pb2/from exporter.kubelet import api_pb2 as api__pb2/' \
  exporter/kubelet/api_pb2_grpc.py
