"""The gauges' rule: an hour read from gauges' samples, for a GPU whose exporter publishes no
integrals for it (dcgm-exporter + kube-state-metrics, our exporter before its counters, the
hour of an upgrade to them). Its samples from the engine's summaries where they tell, raw
where they do not (costsvc/ingest/gauges/steady.py, regular.py, counted.py); each series a step
function of time, integrated at sample resolution (window.py); our exporter's series
(exporter.py), dcgm-exporter's (dcgm.py), energy (power.py). docs/cost-model.md, "Two rules,
one per source". Nothing outside this package looks at its types."""
