"""The rules of labels, workloads, MIG and who may see what, as tests/test_rules_homes.py
checks them (docs/architecture.md, "Rules and their one home"): each rule's home, the names
only it defines and a scan (:data:`DOMAIN_HOMES`) — the lines of a module's syntax tree that
write the rule again —, and a second definer of each to plant (:data:`DOMAIN_DEFINERS`)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

MIG_PROFILE = re.compile(r"\d+g\.\d+gb")  # a MIG profile's name: 1g.10gb


def _is(node: ast.AST, *names: str) -> bool:
    """``node`` is a name, or an attribute whose last part is, one of ``names``."""
    return getattr(node, "id", getattr(node, "attr", None)) in names


def _strings(tree: ast.AST) -> Iterator[ast.Constant]:
    return (n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def history_labels(tree: ast.AST) -> list[int]:
    """Lines that make labels from the Kubernetes-API history win over kube-state-metrics'
    by hand: the history's label keys sanitised (``{sanitize_label(k): v …}``)."""
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.DictComp) and isinstance(n.key, ast.Call)
        if _is(n.key.func, "sanitize_label")
    ]


def template_hashes(tree: ast.AST) -> list[int]:
    """Lines that read a pod's ``pod-template-hash`` by hand (the label's name, either form)."""
    hashes = ("pod-template-hash", "label_pod_template_hash")
    return [n.lineno for n in _strings(tree) if n.value in hashes]


def slice_shares(tree: ast.AST) -> list[int]:
    """Lines that work out a MIG instance's share of its GPU by hand: a division by a GPU's
    (or a table's) ``compute_slices`` or ``memory_slices``."""
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)
        if _is(n.right, "compute_slices", "memory_slices")
    ]


def _profile_names(text: str) -> bool:
    """``text`` is MIG profiles' names (``"3g.40gb"``, ``"1g.5gb 1g.10gb"``), nothing else."""
    return bool(text.split()) and all(MIG_PROFILE.fullmatch(word) for word in text.split())


def mig_tables(tree: ast.AST) -> list[int]:
    """Lines that write MIG profiles per GPU model again: profiles' names or an NVIDIA GPU
    model's (``"NVIDIA A30"``) in the code."""
    return [
        n.lineno for n in _strings(tree) if _profile_names(n.value) or n.value.startswith("NVIDIA ")
    ]


def role_lists(tree: ast.AST) -> list[int]:
    """Lines that list the roles again: ``admin``, ``finance`` and ``team`` written together
    (a tuple, list or set; a ``Literal``'s)."""
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Tuple | ast.List | ast.Set)
        if {"admin", "finance", "team"} <= {e.value for e in n.elts if isinstance(e, ast.Constant)}
    ]


def _callers_team(node: ast.AST) -> bool:
    """``node`` reads a caller's team (``who.team``, ``….principal.team``)."""
    return any(
        isinstance(a, ast.Attribute) and a.attr == "team" and _is(a.value, "who", "principal")
        for a in ast.walk(node)
    )


def callers_team_refusals(tree: ast.AST) -> list[int]:
    """Lines that write the team filter again: a refusal under a test of a caller's team
    (``if … != who.team: raise …``), or a caller's scope written out (``None if who.sees_all
    else who.team``)."""
    found = []
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.If)
            and _callers_team(n.test)
            and any(isinstance(r, ast.Raise) for s in n.body for r in ast.walk(s))
        ):
            found.append(n.lineno)
        sees_all = isinstance(n, ast.IfExp) and any(_is(a, "sees_all") for a in ast.walk(n))
        if sees_all and _callers_team(n):
            found.append(n.lineno)
    return found


def in_force_tests(tree: ast.AST) -> list[int]:
    """Lines that write again when a history's row is in force over a span:
    ``….valid_from < …`` or ``….valid_to > …``."""
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare) and len(n.ops) == 1
        if (isinstance(n.ops[0], ast.Lt) and _is(n.left, "valid_from"))
        or (isinstance(n.ops[0], ast.Gt) and _is(n.left, "valid_to"))
    ]


MIG_TABLE_HOME = "kube/mig_profiles.py"  # both halves': the exporter's fake NVML reads it too
Scan = Callable[[ast.Module], list[int]]
# rule -> (its home, the names only it defines, the scan of what only it writes): a part of
# tests/test_rules_homes.py's ONE_HOME
DOMAIN_HOMES: dict[str, tuple[str, set[str], Scan]] = {
    "labels: the history's over kube-state-metrics'": (
        "costsvc/rules/owners.py",
        {"with_history", "merge_history", "sanitised"},
        history_labels,
    ),
    "labels: the history in force over a span": (
        "costsvc/labels/history.py",
        {"in_force_during", "was_in_force_during", "pods_during"},
        in_force_tests,
    ),
    "workloads: a ReplicaSet's pod-template-hash": (
        "costsvc/rules/workloads.py",
        {"template_hash", "TEMPLATE_HASH"},
        template_hashes,
    ),
    "MIG: a billed share": ("costsvc/rules/mig.py", {"billed_share"}, slice_shares),
    # (the exporter's modules too: tests/test_rules.py)
    "MIG: the per-model profile table": (
        MIG_TABLE_HOME,
        {"MigTable", "MigProfile", "mig_table"},
        mig_tables,
    ),
    "auth: the roles that may use the API": (
        "costsvc/auth/roles.py",
        {"Role", "ROLES", "API_ROLES", "uses_api"},
        role_lists,
    ),
    "auth: the team filter": ("costsvc/auth/principal.py", {"check_team"}, callers_team_refusals),
}
# a second definer of each, planted in a new module (test_a_second_definer_is_found)
DOMAIN_DEFINERS = {
    "labels: the history's over kube-state-metrics'": "h = {sanitize_label(k): v for k, v in x}\n",
    "labels: the history in force over a span": "q = select(t).where(t.valid_from < end)\n",
    "workloads: a ReplicaSet's pod-template-hash": 'h = labels.get("label_pod_template_hash")\n',
    "MIG: a billed share": "s = Decimal(p.compute_slices) / table.compute_slices\n",
    "MIG: the per-model profile table": 'T = {"NVIDIA A30": ("1g.6gb", "2g.12gb")}\n',
    "auth: the roles that may use the API": 'ok = role in ("admin", "finance", "team")\n',
    "auth: the team filter": "if who.team not in teams:\n    raise HTTPException(403)\n",
}
