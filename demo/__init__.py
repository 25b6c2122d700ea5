"""``make demo`` (``python -m demo``): the exporter and the cost service together on one
machine, with simulated GPU nodes. Neither half imports this package."""

import os

# the simulated kubelets' gRPC servers stop at the end of the history while their clients
# are connected: gRPC would print that goodbye (at INFO) into the demo's output; it reads this
# when grpc is first imported, so here, before the exporter imports it
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
