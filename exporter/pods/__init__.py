"""The pod-mapping step: which container holds which GPU, MIG instance or time-slice replica
(the kubelet's pod-resources API), which container a GPU process runs in (/proc cgroup files
and the pod directory), and the shares that follow from both (:mod:`exporter.pods.shares`)."""
