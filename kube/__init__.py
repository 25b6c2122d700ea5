"""What both halves use: the Kubernetes API's client construction (:mod:`kube.client`), label
keys as Prometheus label names (:mod:`kube.label_names`), one list/watch loop
(:mod:`kube.watch`), and the MIG profiles per GPU model (:mod:`kube.mig_profiles`). The
exporter and the cost service share nothing else but Prometheus."""
