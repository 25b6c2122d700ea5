"""Who is calling: API tokens, the pages' sessions, the roles a route admits, the audit log."""
