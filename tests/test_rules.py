"""Each rule has one home (docs/architecture.md, "Rules and their one home"): no other module
defines it again. A second definition is how a rule drifts (MIG slices divided by 7 in three
places, a cache keyed on something written before the data it announces)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("costsvc", "exporter", "kube", "demo", "dashboards")
# the fake NVML's own data mirrors real boards (its tables are what NVML answers)
FAKES = ("exporter/simulate/",)


def _sources() -> dict[str, str]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(FAKES):
                out[rel] = path.read_text()
    return out


SOURCES = _sources()
# a slice count written as a literal: "slices / 7", "/ 8", "% 8", "of 7" in code
SLICE_LITERAL = re.compile(
    r"(?i)slice\w*\W*[/%*]\s*[78]\b|[/%*]\s*[78]\b.*slice|(compute|memory)\w*\)?\s*/\s*[78]\b"
)


def _code_lines(text: str) -> list[str]:
    return [line.split("#", 1)[0] for line in text.splitlines()]


def test_mig_geometry_is_never_a_literal_outside_its_home() -> None:
    found = [
        f"{rel}: {line.strip()}"
        for rel, text in SOURCES.items()
        for line in _code_lines(text)
        if SLICE_LITERAL.search(line)
    ]
    assert found == []


def test_the_per_model_mig_table_has_one_home() -> None:
    # the cost service's table of slices per model lives in costsvc/rules/mig.py only
    definers = [
        rel
        for rel, text in SOURCES.items()
        if re.search(r"^\w*(BY_MODEL|MigTable)\b\s*[:=(]", text, re.M) and rel.startswith("costsvc")
    ]
    assert definers == ["costsvc/rules/mig.py"]
    users = [rel for rel, text in SOURCES.items() if "mig_share_basis" in text and "/ 8" in text]
    assert users == []


def test_the_data_version_has_one_home() -> None:
    bumpers = [rel for rel, text in SOURCES.items() if re.search(r"\bDataVersion\b", text)]
    assert sorted(bumpers) == ["costsvc/db/models.py", "costsvc/db/version.py"]
    readers = [
        rel for rel, text in SOURCES.items() if re.search(r"import[^\n]*\bdata_version\b", text)
    ]
    assert readers == ["costsvc/api/cache.py"]  # every cache reads it through the cache module
    # no other version: the newest run or audit id is not one
    assert not any(
        re.search(r"func\.max\((IngestRun|AuditEntry)\.id\)", text) for text in SOURCES.values()
    )


def test_these_rules_are_listed_with_their_home() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("## Rules and their one home", 1)[1].split("\n## ", 1)[0]
    for home in ("costsvc/rules/mig.py", "costsvc/db/version.py", "costsvc/ingest/run.py"):
        assert f"`{home}`" in section, home
