"""Alembic environment: the URL is the caller's (costsvc.db.migrate) or COSTSVC_DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from costsvc.db.models import Base
from costsvc.kit.settings import Settings

config = context.config
url = config.get_main_option("sqlalchemy.url") or Settings().database_url
target_metadata = Base.metadata


def run_offline() -> None:
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    given = config.attributes.get("connection")  # costsvc.db.migrate: holding its lock
    if given is not None:
        _migrate(given)
        return
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        _migrate(connection)
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
