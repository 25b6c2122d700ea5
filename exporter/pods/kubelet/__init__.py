"""The kubelet's pod-resources v1 API: api.proto, its generated stubs (scripts/gen_protos.sh) and
the client."""
