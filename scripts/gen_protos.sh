#!/usr/bin/env bash
# Regenerates exporter/pods/kubelet/api_pb2*.py from api.proto (needs grpcio-tools in the venv).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m grpc_tools.protoc -I exporter/pods/kubelet --python_out=exporter/pods/kubelet \
  --pyi_out=exporter/pods/kubelet --grpc_python_out=exporter/pods/kubelet exporter/pods/kubelet/api.proto
# the generated service module imports "api_pb2" as a top-level module; make it package-relative
sed -i 's/^import api_pb2 as api__pb2/from exporter.pods.kubelet import api_pb2 as api__pb2/' \
  exporter/pods/kubelet/api_pb2_grpc.py
