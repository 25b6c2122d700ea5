"""Monthly budgets per team or project: kept, checked against the costs, served."""
