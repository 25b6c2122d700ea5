"""PromQL label matchers and groupings, named for what they select.

Series and labels are those of docs/metrics.md (exporter) and docs/costsvc-metrics.md (cost
service). Dashboard variables only ever appear as `label=~"$var"`: "All" is the regex `.*`.
Every selector starts with :data:`CLUSTER`: each dashboard's `cluster` variable reaches every
query (tests/dashboards/test_dashboards.py ``test_every_query_selects_the_cluster``).
"""

# the clusters picked in the dashboard's `cluster` variable ("All" also matches series without
# the label: a single-cluster Prometheus)
CLUSTER = 'cluster=~"$cluster"'

# --------------------------------------------------------------------------- exporter series

# the GPUs picked by the fleet dashboard's model, node and GPU variables
FLEET_GPUS = f'{CLUSTER}, modelName=~"$modelName", Hostname=~"$Hostname", gpu=~"$gpu"'
# the exporters picked by the fleet dashboard's job variable (their own health series)
EXPORTERS = f'{CLUSTER}, job=~"$job"'
# one series per physical GPU
PER_GPU = "cluster, Hostname, gpu"
# clock event reasons other than the normal state of an idle GPU
NOT_IDLE_REASON = 'reason!="gpu_idle"'
# the MIG instances picked by the MIG dashboard's node, GPU and profile variables
MIG_INSTANCES = (
    f'{CLUSTER}, Hostname=~"$Hostname", gpu=~"$gpu", GPU_I_PROFILE=~"$profile", GPU_I_ID!=""'
)
# one series per MIG GPU instance
PER_MIG_INSTANCE = "cluster, Hostname, gpu, GPU_I_ID, GPU_I_PROFILE"
# the holdings (gpu_allocation_share, container utilisation) of the workloads dashboard's pods
POD_HOLDINGS = f'{CLUSTER}, namespace=~"$namespace", pod=~"$pod", Hostname=~"$Hostname"'
# one series per (device, container) holding
PER_HOLDING = "cluster, Hostname, gpu, GPU_I_ID, namespace, pod, container"

# --------------------------------------------------------------------------- cost service series

# cost lines (team, project, stage) in the selected currency
COST_LINES = (
    f'{CLUSTER}, team=~"$team", project=~"$project", stage=~"$stage", currency=~"$currency"'
)
# per-team money (no project or stage label) in the selected currency
TEAM_MONEY = f'{CLUSTER}, team=~"$team", currency=~"$currency"'
# efficiency ratios of the selected lines (no currency label)
EFFICIENCY_LINES = f'{CLUSTER}, team=~"$team", project=~"$project", stage=~"$stage"'
# per-pod cost series (no stage label)
POD_COSTS = f'{CLUSTER}, team=~"$team", project=~"$project", currency=~"$currency"'
# energy and carbon of the selected lines (no currency label)
ENERGY_LINES = f'{CLUSTER}, team=~"$team", project=~"$project", stage=~"$stage"'
# budgets, set per team and project
BUDGETS = f'{CLUSTER}, team=~"$team", project=~"$project"'
# fleet-wide series in the selected currency
CURRENCY = f'{CLUSTER}, currency=~"$currency"'
# lines of real teams: not unallocated idle (__idle__) nor pods without a team (__unallocated__)
TEAMS_ONLY = 'team!~"__idle__|__unallocated__"'
# one series per cost line in a cluster (the cost service's money series carry the cluster
# each line ran in: docs/costsvc-metrics.md)
PER_LINE = "cluster, team, project, stage"

# rightsizing series of the selected teams in the selected currency
SAVINGS = f'{CLUSTER}, team=~"$team", currency=~"$currency"'
# quota series of the selected teams and namespaces
QUOTAS = f'{CLUSTER}, team=~"$team", namespace=~"$namespace"'
# one series per team and GPU resource
PER_TEAM_RESOURCE = "team, resource"
# one recommendation: a workload on one GPU model
PER_RECOMMENDATION = "cluster, team, namespace, workload_kind, workload, gpu_model, action, target"

# served-model series (docs/inference.md) of the selected teams: money in the selected currency
SERVED_MODELS = f'{CLUSTER}, team=~"$team", currency=~"$currency"'
SERVED_MODEL_TEAMS = f'{CLUSTER}, team=~"$team"'
# one series per served model in a cluster (rates are not summed across clusters)
PER_SERVED_MODEL = "cluster, namespace, model"

# --------------------------------------------------------------------------- Kueue's series

# Kueue's ClusterQueue series (docs/queues.md), a follower replica's copies left out
KUEUE_QUEUES = f'{CLUSTER}, replica_role!="follower"'
# one series per ClusterQueue, flavor and resource
PER_KUEUE_QUEUE = "cohort, cluster_queue, flavor, resource"
