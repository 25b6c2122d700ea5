"""The house rules of docs/architecture.md, checked from the source.

The import graph of every folder of Python in the repository (the packages, the benches, the
scripts, the dashboards, deploy/, the migrations and the tests) is built from every ``import``
statement — module level and inside functions alike —, the implicit import of each module's
parent packages, and deploy/'s scripts loading a sibling by file (``_sibling("name")``). It
must have no cycle; the exporter and the cost service never import each other (they meet through
Prometheus and the shared ``kube`` package); routes hold no SQL; every module is named in
docs/architecture.md and every module it names exists; no module is past MAX_LINES lines and no
function of the cost service or the exporter past MAX_FUNCTION_LINES, but short allow-lists.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("exporter", "costsvc", "kube", "demo")  # named module by module in the doc
# every top-level folder that holds Python: the import-cycle check covers them all
FOLDERS = (*PACKAGES, "bench", "scripts", "dashboards", "deploy", "migrations", "tests")
GENERATED = {"exporter.pods.kubelet.api_pb2", "exporter.pods.kubelet.api_pb2_grpc"}
MAX_LINES = 500  # a module past it mixes steps (docs/architecture.md, rule 7)
# the only modules allowed past MAX_LINES: generated code
LONG_ALLOWED = {
    "exporter/pods/kubelet/api_pb2.py",
    "exporter/pods/kubelet/api_pb2_grpc.py",
}
MAX_FUNCTION_LINES = 80  # a function past it (def to last line) mixes steps: name them
FUNCTIONS_OF = ("costsvc", "exporter")  # the folders whose functions are held to it
# the only functions allowed past MAX_FUNCTION_LINES, "path:function" -> why (generated code
# aside); an entry that is gone, or no longer over, fails the test too
LONG_FUNCTIONS_ALLOWED: dict[str, str] = {}
PAGES = "costsvc.pages"  # the pages: no SQL either


def is_route(name: str) -> bool:
    """A domain's routes: ``costsvc.<domain>.routes`` or ``costsvc.<domain>.<what>_routes``."""
    last = name.rpartition(".")[2]
    return name.startswith("costsvc.") and (last == "routes" or last.endswith("_routes"))


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(folders: tuple[str, ...] = PACKAGES, root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in folders:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(path, root)] = path
    return found


def imported(path: Path, name: str, known: dict[str, Path]) -> Iterator[str]:
    """Every module of ours that ``path`` (module ``name``) imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif (  # deploy/sync.py: _sibling("values_doc") loads deploy/values_doc.py by file
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "_sibling"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            targets = [f"{name.rpartition('.')[0]}.{node.args[0].value}"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            # ``from pkg import mod`` imports the submodule pkg.mod when there is one
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            found = target
            while found and found not in known:  # ``import a.b.c`` of a name inside a.b
                found = found.rpartition(".")[0]
            if found:
                yield found


def graph(folders: tuple[str, ...] = FOLDERS, root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(folders, root)
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        edges[name] |= set(imported(path, name, known)) - {name}
        parent = name.rpartition(".")[0]
        if parent in known:  # importing a.b.c runs a/__init__.py and a/b/__init__.py first
            edges[name].add(parent)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_function_level_imports_and_parents() -> None:
    """The checker itself: an import inside a function is an edge, and so is the parent."""
    edges = graph()
    assert "costsvc.db.models" in edges["costsvc.db.runs"]
    assert "costsvc.db" in edges["costsvc.db.runs"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_the_cycle_check_covers_every_folder_of_python() -> None:
    """A new top-level folder of Python is not left out of the import-cycle check."""
    held = {
        d.name
        for d in ROOT.iterdir()
        if d.is_dir() and not d.name.startswith(".") and next(d.rglob("*.py"), None)
    }
    assert held == set(FOLDERS)
    edges = graph()
    assert "bench.phases" in edges["bench.rollup_scale"]  # a bench's imports are seen
    assert "deploy.values_doc" in edges["deploy.sync"]  # and deploy/'s sibling loads


def test_a_cycle_in_any_folder_is_found(tmp_path: Path) -> None:
    """The check on a tree with a cycle among benches (one import inside a function) and one
    among deploy/'s scripts (loaded by file): both are found."""
    files = {
        "bench/a.py": "def f() -> None:\n    from bench.b import g\n",
        "bench/b.py": "from bench import a\n\ndef g() -> None: ...\n",
        "bench/c.py": "import bench.a\n",
        "deploy/x.py": "Y = _sibling('y')\n",
        "deploy/y.py": "def f() -> object:\n    return _sibling('x')\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(text)
    found = cycles(graph(("bench", "deploy"), tmp_path))
    assert found == [["bench.a", "bench.b"], ["deploy.x", "deploy.y"]]


@pytest.mark.parametrize(("half", "other"), [("costsvc", "exporter"), ("exporter", "costsvc")])
def test_the_two_halves_never_import_each_other(half: str, other: str) -> None:
    crossing = sorted(
        f"{a} -> {b}"
        for a, targets in graph().items()
        if a.split(".")[0] == half
        for b in targets
        if b.split(".")[0] == other
    )
    assert crossing == []


def test_routes_hold_no_sql() -> None:
    """A route or page module imports nothing from SQLAlchemy and no table: its data comes
    from costsvc.costs.queries, costsvc.reports.monthly, costsvc.months.close and the persistence
    layer's functions."""
    offenders = []
    for name, path in modules().items():
        if not (is_route(name) or name.startswith(PAGES)):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            offenders += [
                f"{name}: {n}"
                for n in names
                if n.split(".")[0] == "sqlalchemy" or n == "costsvc.db.models"
            ]
    assert offenders == []
    assert len([n for n in modules() if is_route(n)]) >= 5


DOC = ROOT / "docs" / "architecture.md"
MODULE_REF = re.compile(r"`((?:exporter|costsvc|kube|demo)(?:/[A-Za-z0-9_]+)*(?:\.py|/))`")


def documented() -> set[str]:
    """Modules named in docs/architecture.md as paths: ``costsvc/db/runs.py`` (a module) or
    ``costsvc/api/routes/`` (a package: its __init__)."""
    return {
        ref.removesuffix(".py").removesuffix("/").replace("/", ".")
        for ref in MODULE_REF.findall(DOC.read_text(encoding="utf-8"))
    }


def test_every_module_named_in_the_architecture_doc_exists() -> None:
    assert sorted(documented() - set(modules())) == []


def test_every_module_is_in_the_architecture_doc() -> None:
    missing = set(modules()) - documented() - GENERATED
    assert sorted(missing) == []


def test_no_module_is_over_500_lines() -> None:
    """Every module of every folder (tests and benches too) is at most MAX_LINES lines, but
    the short allow-list."""
    assert {p for p in LONG_ALLOWED if not (ROOT / p).is_file()} == set()
    long = sorted(
        f"{rel}: {n} lines"
        for path in modules(FOLDERS).values()
        if (rel := path.relative_to(ROOT).as_posix()) not in LONG_ALLOWED
        and (n := path.read_text(encoding="utf-8").count("\n")) > MAX_LINES
    )
    assert long == []


TREE_LINE = re.compile(r"^((?:[│ ]   )*)(?:[├└]── )?([A-Za-z0-9_]+(?:/|\.py))(?:\s|$)")


def doc_tree(text: str) -> set[str]:
    """The paths drawn in docs/architecture.md's "The layout" tree: each line a folder
    (``name/``) or module (``name.py``), its depth by the ``│   `` columns before it."""
    block = text.split("## The layout", 1)[1].split("```", 2)[1]
    found: set[str] = set()
    parents: list[str] = []
    for line in block.splitlines():
        match = TREE_LINE.match(line)
        if not match:
            continue
        depth = len(match.group(1)) // 4 + (
            1 if match.group(0).lstrip("│ ").startswith(("├", "└")) else 0
        )
        parents = parents[:depth]
        path = "".join(parents) + match.group(2)
        found.add(path)
        if path.endswith("/"):
            parents.append(match.group(2))
    return found


def code_tree(root: Path = ROOT) -> set[str]:
    """Every package folder of the four packages, and the modules at the top of ``costsvc/``
    (the command line only: everything else lives in a domain's folder)."""
    folders = {
        init.parent.relative_to(root).as_posix() + "/"
        for package in PACKAGES
        for init in (root / package).rglob("__init__.py")
    }
    top = {
        p.relative_to(root).as_posix()
        for p in (root / "costsvc").glob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    }
    return folders | top


def test_the_layout_tree_is_the_codes() -> None:
    assert doc_tree(DOC.read_text(encoding="utf-8")) == code_tree()


def test_no_module_at_the_top_of_costsvc_but_the_command_line() -> None:
    assert {p for p in code_tree() if not p.endswith("/")} == {"costsvc/cli.py"}


def test_the_tree_check_sees_a_missing_folder(tmp_path: Path) -> None:
    """A folder in the code but not in the tree, and a module at the top of costsvc/, are
    both found."""
    for rel in ("costsvc/__init__.py", "costsvc/kit/__init__.py", "costsvc/new/__init__.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "costsvc" / "stray.py").write_text("")
    drawn = doc_tree("## The layout\n\n```\ncostsvc/   x\n├── kit/   y\n```\n")
    assert code_tree(tmp_path) - drawn == {"costsvc/new/", "costsvc/stray.py"}


def long_functions(root: Path = ROOT, folders: tuple[str, ...] = FUNCTIONS_OF) -> dict[str, int]:
    """Every function of ``folders`` (methods and nested functions too; generated modules
    left out) longer than MAX_FUNCTION_LINES, as ``path:function`` -> its lines, from its
    ``def`` to its last line."""
    found = {}
    for name, path in modules(folders, root).items():
        if name in GENERATED:
            continue
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{rel}:{node.name}"] = lines
    return found


def function_length_breaches(found: dict[str, int], allowed: dict[str, str]) -> list[str]:
    """The long functions not on the allow-list, and the allow-list's entries that are not
    long functions (gone, or split since: the list stays honest)."""
    long = [f"{key}: {lines} lines" for key, lines in found.items() if key not in allowed]
    gone = [key for key in allowed if key not in found]
    return sorted(
        long + [f"{key}: allowed, but not over {MAX_FUNCTION_LINES} lines" for key in gone]
    )


def test_no_function_is_over_80_lines() -> None:
    """Every function of the cost service and the exporter is at most MAX_FUNCTION_LINES lines,
    but the short allow-list (each entry with its reason)."""
    assert function_length_breaches(long_functions(), LONG_FUNCTIONS_ALLOWED) == []
    assert all(why.strip() for why in LONG_FUNCTIONS_ALLOWED.values())


def test_a_long_function_and_a_stale_allowance_are_found(tmp_path: Path) -> None:
    """The check on a tree with a method of 81 lines, a function of 80, a long function in
    generated code and one in a folder the rule does not cover: only the method is long; an
    allow-list entry for a function of 80 lines, or for one that is gone, is stale."""

    def lines(indent: str, n: int) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(n))

    files = {
        "exporter/long.py": "class C:\n    def run(self) -> None:\n" + lines(" " * 8, 80),
        "costsvc/short.py": "def fits() -> None:\n" + lines(" " * 4, 79),
        "exporter/pods/kubelet/api_pb2.py": "def stub() -> None:\n" + lines(" " * 4, 90),
        "kube/other.py": "def elsewhere() -> None:\n" + lines(" " * 4, 90),
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    found = long_functions(tmp_path)
    assert found == {"exporter/long.py:run": 81}
    assert function_length_breaches(found, {}) == ["exporter/long.py:run: 81 lines"]
    assert function_length_breaches(found, {"exporter/long.py:run": "a table"}) == []
    stale = {"exporter/long.py:run": "a", "costsvc/short.py:fits": "b", "costsvc/gone.py:f": "c"}
    assert function_length_breaches(found, stale) == [
        "costsvc/gone.py:f: allowed, but not over 80 lines",
        "costsvc/short.py:fits: allowed, but not over 80 lines",
    ]
