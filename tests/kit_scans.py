"""The rules of text and number forms and the kit, as tests/test_rules_homes.py checks them
(docs/architecture.md, "Rules and their one home"): billing months and ISO text
(costsvc/kit/times.py), times in SQL (costsvc/kit/sql_times.py), ``group_by``
(costsvc/rules/chargeback.py), comma lists (costsvc/kit/lists.py), rounding to micro-units and
money as text (costsvc/kit/money.py), kWh as text (costsvc/rules/energy.py), an input quoted
in a message (costsvc/kit/quoting.py), spreadsheet-safe cells (costsvc/kit/csv_cells.py),
ratios (costsvc/kit/ratios.py) and a budget's state (costsvc/budgets/state.py). Each rule's
home, the names only it defines and a scan (:data:`KIT_HOMES`) — the lines of a module's
syntax tree that write the rule again —, and a second definer of each to plant
(:data:`KIT_DEFINERS`)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

TIMES_HOME = "costsvc/kit/times.py"
SQL_TIMES_HOME = "costsvc/kit/sql_times.py"
GROUP_BY_HOME = "costsvc/rules/chargeback.py"
LISTS_HOME = "costsvc/kit/lists.py"
MONEY_HOME = "costsvc/kit/money.py"
QUOTING_HOME = "costsvc/kit/quoting.py"
CSV_HOME = "costsvc/kit/csv_cells.py"
KWH_HOME = "costsvc/rules/energy.py"
RATIO_HOME = "costsvc/kit/ratios.py"
BUDGET_HOME = "costsvc/budgets/state.py"


def _calls(tree: ast.AST) -> Iterator[ast.Call]:
    return (n for n in ast.walk(tree) if isinstance(n, ast.Call))


def _const(node: ast.AST, *values: object) -> bool:
    return isinstance(node, ast.Constant) and node.value in values and node.value is not True


def _named(node: ast.AST, *names: object) -> bool:
    """``node`` is one of ``names`` (a name, an attribute's last part) or a constant in them."""
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Attribute):
        return node.attr in names
    return _const(node, *names)


def _texts(tree: ast.AST) -> Iterator[ast.Constant]:
    """Every string constant, the parts of f-strings and their format specs included."""
    return (n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def _months(tree: ast.AST) -> list[int]:
    """Lines that write the billing month again: month arithmetic (``… % 12``, ``… // 12``)
    or the month's pattern (``(0[1-9]|1[0-2])``)."""
    found = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod | ast.FloorDiv)
        if _const(n.right, 12)
    ]
    return found + [n.lineno for n in _texts(tree) if "(0[1-9]|1[0-2])" in n.value]


def _iso_by_hand(tree: ast.AST) -> list[int]:
    """Lines that read or write ISO text by hand: ``fromisoformat``, ``strptime``, a method
    ``strftime``, ``isoformat().replace(…)``, or an f-string format ``{t:…T%H:…}``."""
    found = []
    for call in _calls(tree):
        f = call.func
        if not isinstance(f, ast.Attribute) or _named(f.value, "func"):
            continue
        if f.attr in ("fromisoformat", "strptime", "strftime"):
            found.append(call.lineno)
        if (
            f.attr == "replace"
            and isinstance(f.value, ast.Call)
            and _named(f.value.func, "isoformat")
        ):
            found.append(call.lineno)
    specs = [n.format_spec for n in ast.walk(tree) if isinstance(n, ast.FormattedValue)]
    return found + [t.lineno for s in specs if s for t in _texts(s) if "T%H:" in t.value]


SQL_TIME_FUNCTIONS = ("date_trunc", "to_char", "strftime", "timezone", "extract", "julianday")


def _sql_times(tree: ast.AST) -> list[int]:
    """Lines that floor or write a time in SQL: ``func.date_trunc``, ``to_char``, ``strftime``,
    ``timezone``, ``extract`` or ``julianday``, or a ``to_char`` pattern (``…"T"HH24…``)."""
    found = [
        call.lineno
        for call in _calls(tree)
        if isinstance(call.func, ast.Attribute) and _named(call.func.value, "func")
        if call.func.attr in SQL_TIME_FUNCTIONS
    ]
    return found + [n.lineno for n in _texts(tree) if '"T"HH24' in n.value]


def _comma_splits(tree: ast.AST) -> list[int]:
    """Lines that split a parameter's values at commas by hand: ``….split(",")``."""
    return [
        c.lineno
        for c in _calls(tree)
        if _named(c.func, "split") and len(c.args) == 1 and _const(c.args[0], ",")
    ]


MILLIONS = (1_000_000, "MICRO", "MILLION", "PPM")


def _micro_roundings(tree: ast.AST) -> list[int]:
    """Lines that round to a whole unit by hand: ``….quantize(Decimal(1) …)``, or
    ``int(… * 1_000_000)`` (``MICRO``, ``MILLION``, ``PPM``)."""
    found = []
    for call in _calls(tree):
        f, args = call.func, call.args
        if _named(f, "quantize") and args and isinstance(args[0], ast.Call):
            one = args[0].args
            if _named(args[0].func, "Decimal") and len(one) == 1 and _const(one[0], 1):
                found.append(call.lineno)
        if _named(f, "int") and len(args) == 1 and isinstance(args[0], ast.BinOp):
            product = args[0]
            if isinstance(product.op, ast.Mult) and (
                _named(product.left, *MILLIONS) or _named(product.right, *MILLIONS)
            ):
                found.append(call.lineno)
    return found


def _cuts(tree: ast.AST) -> list[int]:
    """Lines that cut an input for a message by hand: ``text[:64]`` (or ``[:SHOWN]``)."""
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Slice) and n.lower is None and n.step is None
        if n.upper is not None and _named(n.upper, 64, "SHOWN")
    ]


def _cell_guards(tree: ast.AST) -> list[int]:
    """Lines that make a cell spreadsheet-safe again: the formula starts written out
    (``"=", "+", "-", "@"`` in one collection), or ``DANGEROUS_FIRST`` used."""
    found = [n.lineno for n in ast.walk(tree) if _named(n, "DANGEROUS_FIRST")]
    for n in ast.walk(tree):
        starts = {getattr(e, "value", None) for e in getattr(n, "elts", ())}
        if isinstance(n, ast.Tuple | ast.List | ast.Set) and {"=", "+", "-", "@"} <= starts:
            found.append(n.lineno)
    return found


def _divided_by(node: ast.AST, *names: object) -> bool:
    """``node`` holds a division by one of ``names``."""
    return any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and _named(n.right, *names)
        for n in ast.walk(node)
    )


def _written(tree: ast.AST, *names: object) -> list[int]:
    """Lines that write as text an amount divided by one of ``names``: quantized, or formatted
    in an f-string (``{… / 1_000_000:.6f}``)."""
    found = [
        c.lineno
        for c in _calls(tree)
        if isinstance(c.func, ast.Attribute) and c.func.attr == "quantize"
        if _divided_by(c.func.value, *names)
    ]
    for n in ast.walk(tree):
        if isinstance(n, ast.FormattedValue) and n.format_spec and _divided_by(n.value, *names):
            found.append(n.lineno)
    return found


def _group_by_texts(tree: ast.AST) -> list[int]:
    """Lines that refuse a ``group_by`` again (``… names a dimension twice``)."""
    return [n.lineno for n in _texts(tree) if "names a dimension twice" in n.value]


def _money_texts(tree: ast.AST) -> list[int]:
    """Lines that write micro-units as text by hand: ``divmod(…, 1_000_000)``, a cast to
    ``Numeric(…, 6)``, or a division by a million quantized or formatted."""
    found = [
        c.lineno
        for c in _calls(tree)
        if _named(c.func, "divmod") and len(c.args) == 2 and _named(c.args[1], *MILLIONS)
    ]
    found += [
        c.lineno
        for c in _calls(tree)
        if _named(c.func, "Numeric") and len(c.args) == 2 and _const(c.args[1], 6)
    ]
    return found + _written(tree, *MILLIONS)


def _kwh_texts(tree: ast.AST) -> list[int]:
    """Lines that write energy as kWh text by hand: a division by ``MJ_PER_KWH`` quantized or
    formatted, or ``func.round(…, 9)``."""
    found = [
        c.lineno
        for c in _calls(tree)
        if _named(c.func, "round") and len(c.args) == 2 and _const(c.args[1], 9)
    ]
    return found + _written(tree, "MJ_PER_KWH", 3_600_000_000)


def _ratio_texts(tree: ast.AST) -> list[int]:
    """Lines that round a ratio down for an answer by hand (``ROUND_FLOOR``)."""
    return [n.lineno for n in ast.walk(tree) if _named(n, "ROUND_FLOOR")]


Scan = Callable[[ast.Module], list[int]]
# rule -> (its home, the names only it defines, the scan of what only it writes)
KIT_HOMES: dict[str, tuple[str, set[str], Scan]] = {
    "months: a billing month": (
        TIMES_HOME,
        {"MONTH", "month_of", "parse_month", "next_month", "months_after", "quarter_floor"},
        _months,
    ),
    # (a memo of iso_z may keep its name: costsvc/opencost/shape.py)
    "time: ISO text": (TIMES_HOME, {"parse_utc"}, _iso_by_hand),
    "time: a floor in SQL": (
        SQL_TIMES_HOME,
        {"bucket", "iso_z_sql", "step_index", "PG_FLOORS", "SQLITE_FLOORS"},
        _sql_times,
    ),
    "group_by: its parser": (GROUP_BY_HOME, {"parse_group_by"}, _group_by_texts),
    "lists: comma-separated values": (LISTS_HOME, {"comma_list"}, _comma_splits),
    "money: a rounding to micro-units": (MONEY_HOME, {"to_micro", "round_micro"}, _micro_roundings),
    "money: an amount as text": (
        MONEY_HOME,
        {"money", "money_sql", "money_rounded", "kg"},
        _money_texts,
    ),
    "energy: kWh as text": (KWH_HOME, {"kwh", "kwh_sql"}, _kwh_texts),
    "quoting: an input cut for a message": (QUOTING_HOME, {"cut", "clip"}, _cuts),
    "csv: a spreadsheet-safe cell": (
        CSV_HOME,
        {"safe_cell", "safe_cell_sql", "DANGEROUS_FIRST"},
        _cell_guards,
    ),
    "ratio: a ratio as text": (RATIO_HOME, {"ratio", "ratio_text", "SIX_PLACES"}, _ratio_texts),
    "budgets: a budget's state": (
        BUDGET_HOME,
        {"budget_state", "currency_mismatch"},  # (BudgetState: also the API's answer model)
        lambda tree: [],  # (the names: nothing else to scan for)
    ),
}

KIT_DEFINERS = {
    "months: a billing month": "n = m.month % 12 + 1\n",
    "time: ISO text": 't = datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ")\n',
    "time: a floor in SQL": 'b = func.date_trunc("hour", c.hour)\n',
    "group_by: its parser": "def parse_group_by(values):\n    return values\n",
    "lists: comma-separated values": 'v = [x for x in text.split(",") if x]\n',
    "money: a rounding to micro-units": "n = int(x * 1_000_000)\n",
    "money: an amount as text": "units, frac = divmod(micro, 1_000_000)\n",
    "energy: kWh as text": "t = (Decimal(mj) / MJ_PER_KWH).quantize(NINE)\n",
    "quoting: an input cut for a message": "m = f'bad {name[:64]!r}'\n",
    "csv: a spreadsheet-safe cell": 'FORMULA = ("=", "+", "-", "@")\n',
    "ratio: a ratio as text": "t = str(v.quantize(SIX, rounding=ROUND_FLOOR))\n",
    "budgets: a budget's state": "def budget_state(used, amount):\n    return used / amount\n",
}
