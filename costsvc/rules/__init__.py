"""The rules that decide the money, pure: the cost model (cost_model) and where the one in force
lives (cost_model_source), who pays for each GPU-hour (attribution), the chargeback line's
vocabulary (chargeback), energy and carbon (energy), a MIG GPU's geometry and billed share (mig),
the owner rule (owners) and which workload a pod belongs to (workloads)."""
