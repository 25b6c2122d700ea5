"""The API's routers, one module per domain. Routes hold no SQL: they call costsvc.queries,
costsvc.reports, costsvc.close and the persistence layer (costsvc.db)."""
