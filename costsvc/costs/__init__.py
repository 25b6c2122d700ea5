"""Cost queries: ``/v1/costs``, a team's summary and the cost model in force, over the chargeback
tables."""
