"""A series' identity (its labels without ``__name__``), and which selectors pick out some
series of a selector by their exact label sets: for reading only those series' samples (the
gauges' series a summary does not tell, costsvc/ingest/gauges/steady.py; a counter's
samples around a reset or an hour's edge, costsvc/ingest/integrals.py).
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal

from costsvc.ingest.prom import PrometheusReader, Series

Key = tuple[tuple[str, str], ...]  # a series' labels without __name__, sorted


def key_of(labels: dict[str, str]) -> Key:
    """A series' identity: its labels without ``__name__``, sorted."""
    if "__name__" not in labels:  # (a function's answer: the name is gone)
        return tuple(sorted(labels.items()))
    named = dict(labels)  # (a copy and a pop: C loops, where a filter is a Python one)
    del named["__name__"]
    return tuple(sorted(named.items()))


TOO_UNSTEADY = Decimal("0.5")  # more unsteady series than this share: the selector read raw
MATCH_LABELS = ("pod", "UUID", "instance")  # how the series are picked out, in order
MATCH_CHUNK = 200  # values per regex matcher
_PLAIN = re.compile(r"[A-Za-z0-9_:/.-]+")


def picks(selector: str, keys: set[Key], total: int) -> list[str]:
    """Selectors that pick out these series of ``selector`` (and maybe others): one regex
    matcher on ``pod``, else ``UUID``, else ``instance`` per :data:`MATCH_CHUNK` values; the
    whole selector where they are more than half of its ``total`` series or no such label
    tells them (every series has it, its values DNS-like names)."""
    if len(keys) > TOO_UNSTEADY * total:
        return [selector]
    sets = [dict(k) for k in keys]
    name = next((n for n in MATCH_LABELS if all(n in lab for lab in sets)), None)
    values = sorted({lab[name] for lab in sets}) if name is not None else []
    texts = [_regex_text(v) for v in values]
    if name is None or None in texts:
        return [selector]
    return [
        f'{selector}{{{name}=~"{"|".join(texts[i : i + MATCH_CHUNK])}"}}'  # type: ignore[arg-type]
        for i in range(0, len(texts), MATCH_CHUNK)
    ]


def _regex_text(value: str) -> str | None:
    """A label value as an RE2 literal inside a PromQL double-quoted string (None: a value
    with characters other than DNS-name ones, read with the whole selector instead)."""
    if not _PLAIN.fullmatch(value):
        return None
    return value.replace(".", "\\\\.")


def read_raw(
    prom: PrometheusReader,
    selector: str,
    at: datetime,
    seconds: int,
    keys: set[Key],
    total: int,
) -> list[Series]:
    """The raw samples of these series (exact label sets) of ``selector`` (``total``: its
    series in all)."""
    if not keys:
        return []
    return [
        s
        for picked in picks(selector, keys, total)
        for s in prom.raw(picked, at, seconds)
        if key_of(s.labels) in keys
    ]
