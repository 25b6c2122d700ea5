"""Each rule has one home (docs/architecture.md, "Rules and their one home"): no other module
defines it again. A second definition is how a rule drifts (MIG slices divided by 7 in three
places, a cache keyed on something written before the data it announces)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.rule_scans import mig_tables

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
    # the table of slices per model lives in kube/mig_profiles.py only (both halves read it)
    definers = [
        rel
        for rel, text in SOURCES.items()
        if re.search(r"^\w*(BY_MODEL|MigTable)\b\s*[:=(]", text, re.M)
        and rel.startswith(("costsvc", "kube"))
    ]
    assert definers == ["kube/mig_profiles.py"]
    users = [rel for rel, text in SOURCES.items() if "mig_share_basis" in text and "/ 8" in text]
    assert users == []


def test_the_mig_table_is_written_in_kube_only() -> None:
    """The MIG profiles per GPU model, in both halves: the exporter (its fake NVML too) and
    kube/ read them from kube/mig_profiles.py, as the cost service does (its modules:
    tests/test_rules_homes.py); none writes a profile's or a model's name again."""
    home = "kube/mig_profiles.py"
    trees = {
        p.relative_to(ROOT).as_posix(): ast.parse(p.read_text(), p.as_posix())
        for half in ("exporter", "kube")
        for p in sorted((ROOT / half).rglob("*.py"))
    }
    found = {
        rel: lines for rel, tree in trees.items() if rel != home and (lines := mig_tables(tree))
    }
    assert found == {}
    assert mig_tables(trees[home])  # the scan sees the table: in a second module, it fails
    assert mig_tables(ast.parse('PROFILES = {"3g.40gb": (3, 4)}\n'))


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
