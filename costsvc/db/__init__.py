"""The cost service's tables (SQLAlchemy 2) and their migrations (Alembic, in migrations/)."""
