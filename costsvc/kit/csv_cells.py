"""CSV as the cost service writes it: QUOTE_MINIMAL, ``\\n`` line ends (as PostgreSQL's COPY
writes them), any cell holding CR or LF quoted, and text cells made safe to open in a
spreadsheet: :func:`safe_cell` in Python and its twin :func:`safe_cell_sql` in SQL (the
PostgreSQL COPY path of the CSV export), side by side so they cannot drift; no other module
writes the rule (tests/test_rules_homes.py). Pure: SQL expressions are built, never run."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from sqlalchemy import String, case, cast, func, literal

# a cell starting with one of these is a formula to Excel, LibreOffice and Sheets
DANGEROUS_FIRST = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(text: str) -> str:
    """``text`` made safe to open in a spreadsheet: a cell starting with ``=``, ``+``, ``-``,
    ``@``, tab or CR gets a leading ``'``."""
    return "'" + text if text.startswith(DANGEROUS_FIRST) else text


def safe_cell_sql(column: Any) -> Any:
    """:func:`safe_cell` as a SQL expression over a column, as text (PostgreSQL's COPY): an
    empty text is NULL, which COPY writes as an empty field, as the csv module writes ``""``
    (COPY would write ``""`` quoted)."""
    value = cast(column, String)
    return case(
        (func.substr(value, 1, 1).in_(DANGEROUS_FIRST), literal("'") + value),
        else_=func.nullif(value, ""),
    )


class CsvLines:
    """CSV rows as text, taken back piece by piece. A cell holding a CR is quoted too: such a
    row (rare, but labels are untrusted) is formatted with a ``\\r\\n`` terminator, which makes
    the csv module quote either character, and its line end swapped back — a bare CR must not
    split a row (with a ``\\n`` terminator the csv module leaves it unquoted)."""

    def __init__(self) -> None:
        self._buf = io.StringIO()
        self._fast = csv.writer(self._buf, lineterminator="\n")
        self._cr = io.StringIO()
        self._careful = csv.writer(self._cr, lineterminator="\r\n")

    def row(self, cells: Sequence[object]) -> None:
        if any(isinstance(c, str) and "\r" in c for c in cells):
            self._careful.writerow(cells)
            self._buf.write(self._cr.getvalue()[:-2] + "\n")
            self._cr.seek(0)
            self._cr.truncate()
        else:
            self._fast.writerow(cells)

    def rows(self, rows: list[Sequence[object]]) -> None:
        if any("\r" in c for r in rows for c in r if isinstance(c, str)):
            for r in rows:
                self.row(r)
        else:
            self._fast.writerows(rows)

    def take(self) -> str:
        text = self._buf.getvalue()
        self._buf.seek(0)
        self._buf.truncate()
        return text


def csv_line(cells: Sequence[object]) -> str:
    """One CSV line (ending in ``\\n``) of ``cells``, as :class:`CsvLines` writes it."""
    out = CsvLines()
    out.row(cells)
    return out.take()
