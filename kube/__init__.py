"""The Kubernetes API as both halves use it: client construction (:mod:`kube.client`), label
keys as Prometheus label names (:mod:`kube.label_names`) and one list/watch loop
(:mod:`kube.watch`). The exporter and the cost service share nothing else but Prometheus."""
