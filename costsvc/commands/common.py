"""What the cost service's commands share: the usage error (exit 2), the query-API reader
and the cost model in force from the settings, a database failure as one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from costsvc.kit.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from costsvc.ingest.prom import PrometheusReader
    from costsvc.rules.cost_model import CostModel

PROG = "gpu-costsvc"


class UsageError(Exception):
    pass


def cost_model_in_force(settings: Settings, engine: Engine, hint: str = "") -> CostModel:
    """The cost model in force (costsvc/rules/cost_model_source.py), or a usage error naming why
    not."""
    from sqlalchemy.exc import SQLAlchemyError

    from costsvc.rules.cost_model import CostModelError
    from costsvc.rules.cost_model_source import in_force

    try:
        return in_force(settings.cost_model, engine).model
    except CostModelError as exc:
        raise UsageError(f"COSTSVC_COST_MODEL: {exc}{hint}") from None
    except SQLAlchemyError as exc:  # no file, and a database without the schema (or down)
        from costsvc.db.engine import trouble

        if (down := trouble(engine, exc)) is not None:
            raise down from None
        raise UsageError(
            "COSTSVC_COST_MODEL is not set and the database holds no cost model (run "
            f"gpu-costsvc db upgrade, then gpu-costsvc cost-model import FILE){hint}"
        ) from None


def reader_headers(settings: Settings) -> dict[str, str]:
    try:
        return settings.prometheus_request_headers()
    except (OSError, ValueError) as exc:
        raise UsageError(f"COSTSVC_PROMETHEUS_BEARER_TOKEN_FILE: {exc}") from None


def prometheus_reader(settings: Settings) -> PrometheusReader:
    """The query API client of the settings (a bad token file fails start-up, naming it)."""
    from costsvc.ingest.prom import PrometheusReader

    return PrometheusReader(
        settings.prometheus_url,
        headers=reader_headers(settings),
        params=settings.prometheus_params,
        compress=settings.prometheus_compression,
    )


def database_failure(settings: Settings | None, exc: BaseException) -> str | None:
    """One line for an error of the database itself or of a statement in it (naming the
    database, never its password), or None for any other error."""
    from sqlalchemy.exc import DBAPIError

    from costsvc.db.engine import DatabaseTrouble, make_engine, trouble

    if isinstance(exc, DatabaseTrouble):
        return str(exc)
    if not isinstance(exc, DBAPIError) or settings is None:
        return None
    engine = make_engine(settings.database_url)
    try:
        found = trouble(engine, exc)
        where = engine.url.render_as_string(hide_password=True)
    finally:
        engine.dispose()
    if found is not None:
        return str(found)
    lines = str(exc.orig).strip().splitlines() or [type(exc.orig).__name__]
    return f"the database {where}: {lines[0][:300]}"
