"""How a message quotes an input: at most :data:`SHOWN` characters of it, ``repr``'d (no
control character gets through), with ``…`` where it was cut. Every refusal of the API and
every start-up error quotes untrusted text this way (docs/security.md). Pure."""

from __future__ import annotations

from collections.abc import Iterable

SHOWN = 64  # characters of an input a message may quote


def shown(text: str) -> str:
    """``text`` quoted for a message: repr'd and cut to :data:`SHOWN` characters."""
    return repr(text[:SHOWN]) + ("…" if len(text) > SHOWN else "")


def cut(text: str, limit: int = SHOWN) -> str:
    """``text`` (a name taken from an input: a key, a field) cut to ``limit`` characters
    (:data:`SHOWN` unless told), unquoted, with ``…`` where it was cut."""
    return text[:limit] + ("…" if len(text) > limit else "")


def clip(message: str, inputs: Iterable[str]) -> str:
    """``message`` with every run of more than :data:`SHOWN` characters that it repeats from
    one of ``inputs`` cut to :data:`SHOWN` and ``…``: for messages written in another
    program's words (OpenCost's ``illegal window: <the window>``), whose every part may quote
    a piece of what was sent."""
    long = [v for v in inputs if v and len(v) > SHOWN]
    if not long:
        return message
    out: list[str] = []
    i, n = 0, SHOWN + 1
    while i < len(message):
        if i + n <= len(message) and any(message[i : i + n] in v for v in long):
            j = i + n
            while j < len(message) and any(message[i : j + 1] in v for v in long):
                j += 1
            out.append(message[i : i + SHOWN] + "…")
            i = j
        else:
            out.append(message[i])
            i += 1
    return "".join(out)
