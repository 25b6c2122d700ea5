"""The kubelet side: the pod-resources v1 gRPC client and what its device ids mean."""
