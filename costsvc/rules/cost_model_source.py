"""Where the cost model in force lives, and the one way to change it.

- **A file** (``COSTSVC_COST_MODEL`` set): the operator's YAML — a ConfigMap, a file under
  version control. It is read at every ingest and never written by the service: the API cannot
  replace it (409), so its comments, formatting, owner and mode are the operator's.
- **The database** (``COSTSVC_COST_MODEL`` unset): versions are ``cost_model_versions`` rows;
  the one in force is the one activated last, by ``PUT /v1/cost-model`` or
  ``gpu-costsvc cost-model import FILE``, each audited with the hashes before and after.

Every ingest and reprice records the document it priced with, whichever the source.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from costsvc.db.cost_models import activate, active_document
from costsvc.rules.cost_model import CostModel, CostModelError, LabelKeys, load, parse


class NoCostModel(CostModelError):
    """Neither a file nor a version in the database."""


class FileManaged(CostModelError):
    """The cost model is the operator's file: the service does not change it."""


@dataclass(frozen=True, slots=True)
class InForce:
    source: str  # "file" | "database"
    model: CostModel
    path: Path | None = None
    activated_at: datetime | None = None
    activated_by: str | None = None


def in_force(path: Path | None, engine: Engine) -> InForce:
    """The cost model in force: the file when one is configured, else the database's.
    Raises CostModelError (an invalid or unreadable file) or NoCostModel."""
    if path is not None:
        return InForce("file", load(path), path)
    active = active_document(engine)
    if active is None:
        raise NoCostModel(
            "no cost model: set COSTSVC_COST_MODEL to a file, or keep it in the database "
            "(gpu-costsvc cost-model import FILE, or PUT /v1/cost-model)"
        )
    model = parse(active.document, f"the database's cost model {active.sha256[:12]}")
    return InForce("database", model, None, active.activated_at, active.activated_by)


def label_keys(path: Path | None, engine: Engine) -> LabelKeys:
    """The owner label keys of the cost model in force; the defaults where there is none or
    the file is unusable (the ingest refuses it and says why)."""
    try:
        return in_force(path, engine).model.labels
    except CostModelError:
        return LabelKeys()


def replace(
    path: Path | None, engine: Engine, document: Any, actor: str, via: str, source: str
) -> CostModel:
    """Validate ``document`` and put it in force in the database (audited). FileManaged when
    a file is the cost model; CostModelError naming the field when it is invalid."""
    if path is not None:
        raise FileManaged(
            f"the cost model is managed by the file {path} (COSTSVC_COST_MODEL): change that "
            "file instead; the service never rewrites it. To manage versions through the API, "
            "unset COSTSVC_COST_MODEL and import the file once (gpu-costsvc cost-model import)"
        )
    model = parse(document, source)
    activate(engine, model, actor, via)
    return model
