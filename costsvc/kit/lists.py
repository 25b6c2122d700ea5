"""Values a parameter gives as a list: repeated (``?x=a&x=b``) and/or comma-separated
(``?x=a,b``), read one way everywhere (``/v1``'s ``group_by`` and filters, OpenCost's
``aggregate`` as its ``GetList`` reads it, ``/v1/quotas``' filters, the CLI's
``--group-by``). Pure."""

from __future__ import annotations

from collections.abc import Iterable


def comma_list(values: str | Iterable[str] | None) -> list[str]:
    """Every value in ``values`` (one text, or each occurrence of a repeated parameter) split
    at commas, in order: each stripped of surrounding blanks, empty ones dropped
    (``["a, b", ",c"]`` -> ``["a", "b", "c"]``)."""
    items = (values,) if isinstance(values, str) else values or ()
    return [v for item in items for part in item.split(",") if (v := part.strip())]
