"""Pod and namespace labels: watched from the Kubernetes API and kept as history."""
