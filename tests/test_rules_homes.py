"""Each rule of the cost service has one home (docs/architecture.md, "Rules and their one
home") and no other module writes it again: the time rule (UTC floors: costsvc/kit/times.py; window
forms: costsvc/kit/windows.py), the owner rule (costsvc/rules/owners.py), the price in force
(costsvc/rules/cost_model_source.py) and cache validity (costsvc/api/cache.py). Read from the
modules' syntax trees, so a second definer fails here whatever its names (the MIG geometry and the
data version: tests/test_rules.py)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from tests.kit_scans import KIT_DEFINERS, KIT_HOMES
from tests.rule_scans import DOMAIN_DEFINERS, DOMAIN_HOMES, MIG_TABLE_HOME

ROOT = Path(__file__).resolve().parents[1]
UTC_HOME = "costsvc/kit/times.py"
WINDOWS_HOME = "costsvc/kit/windows.py"
OWNER_HOME = "costsvc/rules/owners.py"
PRICE_HOME = "costsvc/rules/cost_model_source.py"
CACHE_HOME = "costsvc/api/cache.py"
HOMES = (UTC_HOME, WINDOWS_HOME, OWNER_HOME, PRICE_HOME, CACHE_HOME)
HOMES += tuple(home for home, _, _ in KIT_HOMES.values())  # text and number forms, the kit
HOMES += tuple(home for home, _, _ in DOMAIN_HOMES.values())  # labels, workloads, MIG, auth


def _trees(root: Path = ROOT) -> dict[str, ast.Module]:
    return {
        p.relative_to(root).as_posix(): ast.parse(p.read_text(), p.as_posix())
        for p in sorted((root / "costsvc").rglob("*.py"))
    }


TREES = _trees()
# the MIG table's home is both halves' (the exporter's: tests/test_rules.py), read with costsvc
TREES[MIG_TABLE_HOME] = ast.parse((ROOT / MIG_TABLE_HOME).read_text(), MIG_TABLE_HOME)


def _calls(tree: ast.AST) -> Iterator[ast.Call]:
    return (n for n in ast.walk(tree) if isinstance(n, ast.Call))


def _const(node: ast.AST, *values: object) -> bool:
    return isinstance(node, ast.Constant) and node.value in values and node.value is not True


def _floors(tree: ast.AST) -> list[int]:
    """Lines that floor a time by hand: ``t.replace(minute=0 …)`` (or ``hour=0``, ``day=1``),
    ``datetime(t.year, t.month …)``, ``… // 3600`` (or 86400), ``fromtimestamp(… // …)``."""
    found = []
    for call in _calls(tree):
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr == "replace":
            kw = {k.arg: k.value for k in call.keywords}
            if (
                _const(kw.get("minute", ast.Pass()), 0)
                or _const(kw.get("hour", ast.Pass()), 0)
                or _const(kw.get("day", ast.Pass()), 1)
            ):
                found.append(call.lineno)
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if name == "datetime" and any(
            isinstance(a, ast.Attribute) and a.attr in ("year", "month") for a in call.args
        ):
            found.append(call.lineno)
        if name in ("fromtimestamp", "utcfromtimestamp") and any(
            isinstance(b, ast.BinOp) and isinstance(b.op, ast.FloorDiv)
            for a in call.args
            for b in ast.walk(a)
        ):
            found.append(call.lineno)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.FloorDiv | ast.Mod)
            and _const(node.right, 3600, 86400, 3600.0, 86400.0)
        ):
            found.append(node.lineno)
    return sorted(found)


def _defined(tree: ast.Module) -> set[str]:
    """Names a module defines at its top level or in a class: functions, classes, assigned
    names."""
    return _names_of(ast.walk(tree))


def _names_of(nodes: Iterable[ast.AST]) -> set[str]:
    """The names ``nodes`` define: functions, classes, assigned names."""
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def _window_patterns(tree: ast.AST) -> list[int]:
    """Lines with a string that spells window forms (``today``, ``yesterday``, ``lastmonth``
    in one alternation, or OpenCost's ``offset`` durations)."""
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and (("today|" in n.value and "yesterday" in n.value) or ") offset (" in n.value)
    ]


def _pod_then_namespace(tree: ast.AST) -> list[int]:
    """Lines that write the owner rule again: ``pod.get(k) or namespace.get(k)`` (one key,
    two label sets), or label keys converted to the kept form outside the rule's home
    (``LabelKeys(team=[sanitize_label(k) …]``), or ``namespace_fallback`` consulted."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            gets = [
                v
                for v in node.values
                if isinstance(v, ast.Call)
                and isinstance(v.func, ast.Attribute)
                and len(v.args) == 1  # a label looked up: no default
            ]
            receivers = {ast.dump(g.func.value) for g in gets}  # type: ignore[attr-defined]
            keys = {ast.dump(g.args[0]) for g in gets}
            if len(gets) > 1 and len(receivers) > 1 and len(keys) < len(gets):
                found.append(node.lineno)
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", "") == "LabelKeys"
            and any("sanitize_label" in ast.dump(k.value) for k in node.keywords)
        ):
            found.append(node.lineno)
        if isinstance(node, ast.Attribute) and node.attr == "namespace_fallback":
            found.append(node.lineno)
    return sorted(set(found))


def _file_model_reads(tree: ast.AST) -> list[int]:
    """Lines that read the cost model file named by the settings, not the model in force:
    ``load(settings.cost_model)``, or the database's model read past ``in_force``."""
    found = []
    for call in _calls(tree):
        f = call.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if name == "load" and any(
            isinstance(n, ast.Attribute) and n.attr == "cost_model"
            for a in call.args
            for n in ast.walk(a)
        ):
            found.append(call.lineno)
        if name == "active_document":
            found.append(call.lineno)
    return found


def _caches(tree: ast.AST) -> list[int]:
    """Lines that keep values by another rule than the data version: a cache class
    (``…Cache``, ``SharedVersion…``, ``Kept``), or a memo or a clock-based expiry in the
    serving code."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and (
            node.name.endswith("Cache") or node.name.startswith("SharedVersion")
        ):
            found.append(node.lineno)
        if isinstance(node, ast.ClassDef) and node.name == "Kept":
            found.append(node.lineno)
    return found


def _serving(rel: str) -> bool:
    return rel.startswith(("costsvc/api/", "costsvc/pages/"))


def _memos(tree: ast.AST) -> list[int]:
    """``functools`` caches imported into serving code (a value kept by its own rule)."""
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        and n.module == "functools"
        and any(a.name in ("lru_cache", "cache", "cached_property") for a in n.names)
    ]


def _top_level(tree: ast.Module) -> set[str]:
    """Names a module defines at its top level (a method of the same name is another thing)."""
    return _names_of(tree.body)


# rule -> (its home, the names only it defines, the scan of what only it writes)
ONE_HOME: dict[str, tuple[str, set[str], Callable[[ast.Module], list[int]]]] = {
    **KIT_HOMES,  # text and number forms, the kit: tests/kit_scans.py
    **DOMAIN_HOMES,  # labels, workloads, MIG, auth: tests/rule_scans.py
}


def _one_home_offenders(rel: str, tree: ast.Module) -> dict[str, list[int]]:
    """Per rule of :data:`ONE_HOME` that ``rel`` is not the home of, the lines where it
    defines the rule's names (line 0) or writes the rule again."""
    out = {}
    for rule, (home, names, scan) in ONE_HOME.items():
        if rel != home:
            out[rule] = [0] * len(_top_level(tree) & names) + scan(tree)
    return out


def offenders(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Per rule, ``module:line`` of every place outside its home that writes it again."""
    out: dict[str, list[str]] = {}

    def add(rule: str, rel: str, lines: list[int]) -> None:
        out.setdefault(rule, []).extend(f"{rel}:{line}" for line in lines)

    for rel, tree in trees.items():
        if rel != UTC_HOME:
            add("time: a UTC floor", rel, _floors(tree))
            names = {"hour_floor", "day_floor", "week_floor", "month_floor", "truncate"}
            add("time: a floor's name", rel, [0] * len(_defined(tree) & names))
        if rel != WINDOWS_HOME:
            window_names = {"MAX_SPAN", "Window", "parse_window", "window_bounds", "time_range"}
            add("time: a window's definition", rel, [0] * len(_defined(tree) & window_names))
            add("time: window forms", rel, _window_patterns(tree))
        if rel != OWNER_HOME:
            add("owner: pod > namespace > fallback", rel, _pod_then_namespace(tree))
            owner_names = {"resolve_label", "resolve_owner", "sanitised_keys"}
            add("owner: the rule's name", rel, [0] * len(_defined(tree) & owner_names))
        if rel not in (PRICE_HOME, "costsvc/db/cost_models.py"):
            add("price: the model in force", rel, _file_model_reads(tree))
        if rel != CACHE_HOME:
            add("cache: another cache", rel, _caches(tree))
            if _serving(rel):
                add("cache: a memo in serving code", rel, _memos(tree))
        for rule, lines in _one_home_offenders(rel, tree).items():
            add(rule, rel, lines)
    return {rule: where for rule, where in out.items() if where}


def test_every_rule_has_only_its_home() -> None:
    assert offenders(TREES) == {}


def test_each_home_defines_its_rule() -> None:
    """The scan looks for the right things: each home holds what it forbids elsewhere."""
    assert _floors(TREES[UTC_HOME])
    assert {"MAX_SPAN", "Window", "parse_window", "time_range"} <= _defined(TREES[WINDOWS_HOME])
    assert _window_patterns(TREES[WINDOWS_HOME])
    assert _pod_then_namespace(TREES[OWNER_HOME])
    assert _file_model_reads(TREES[PRICE_HOME])
    assert _caches(TREES[CACHE_HOME])


def test_each_one_home_holds_its_rule() -> None:
    """The scans of :data:`ONE_HOME` look for the right things: each home defines the rule's
    names and writes what they forbid elsewhere."""
    for rule, (home, names, scan) in ONE_HOME.items():
        assert names <= _top_level(TREES[home]), rule
        assert scan(TREES[home]) or rule == "budgets: a budget's state", rule


SECOND_DEFINERS = {
    "time: a UTC floor": "now.replace(minute=0, second=0, microsecond=0)\n",
    "time: a window's definition": "MAX_SPAN = 800\n",
    "time: window forms": 'W = "(today|yesterday|week)"\n',
    "owner: pod > namespace > fallback": "v = pod.get(key) or space.get(key) or ''\n",
    "price: the model in force": "m = load(settings.cost_model)\n",
    "cache: another cache": "class TokenCache:\n    pass\n",
    **KIT_DEFINERS,
    **DOMAIN_DEFINERS,
}


@pytest.mark.parametrize("rule", sorted(SECOND_DEFINERS))
def test_a_second_definer_is_found(rule: str) -> None:
    """The test above fails when a module writes a rule again (each kind, in a new module)."""
    trees = dict(TREES)
    trees["costsvc/api/routes/newcomer.py"] = ast.parse(SECOND_DEFINERS[rule])
    assert rule in offenders(trees)


def test_the_rules_are_listed_with_their_homes() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("## Rules and their one home", 1)[1].split("\n## ", 1)[0]
    for home in HOMES:
        assert f"`{home}`" in section, home
