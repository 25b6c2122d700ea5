"""The cost service's own series for Prometheus (``/metrics``): budgets, waste, advice, fleet."""
