"""OpenCost's allocation ``filter`` language (v2), parsed and evaluated. Pure.

The grammar is OpenCost's (opencost/opencost ``core/pkg/filter/ast/parser.go``, lexer in
``lexer.go``)::

    <filter>         ::= <filter-element> (<group-op> <filter-element>)*
    <filter-element> ::= <comparison> | '(' <filter> ')'
    <group-op>       ::= '+' | '|'          (and, or; one kind per group, else an error)
    <comparison>     ::= <field> ('[' <key> ']')? <op> '"' <value> '"' (',' '"' <value> '"')*
    <op>             ::= ':' | '!:' | '~:' | '!~:' | '<~:' | '!<~:' | '~>:' | '!~>:'

``:`` equals, ``~:`` contains, ``<~:`` starts with, ``~>:`` ends with; ``!`` negates. A list
of values is "any of" (``namespace:"a","b"``), and for a negated operator "none of". Strings
end at the next ``"`` (no escapes). Identifiers are ``[0-9A-Za-z_-]``; other bytes outside
strings are an error.

gpu-costsvc keeps, per chargeback line, ``cluster``, ``node``, ``namespace``, ``pod``,
``container``, the pod's controller (``controllerKind`` as OpenCost names kinds,
``controllerName``) and the owner labels (team, project, stage); any other pod label comes from
the label history (costsvc/opencost/podlabels.py). Those fields filter, with
``label[<key>]``, ``team`` (the cost model's team) and OpenCost's other label aliases
(``department``, ``environment``, ``owner``, ``product``: the labels ``department``, ``env``,
``owner``, ``app``). ``services``, ``provider`` and ``annotation[<key>]`` compare with
nothing (gpu-costsvc watches neither Services nor annotations), as OpenCost compares an
allocation that has none; ``label`` and ``annotation`` without a key are refused.

``"__unallocated__"`` is the empty value, as in OpenCost, which rewrites it to ``""`` in every
``:``, ``~:``, ``<~:`` and ``~>:`` comparison (their ``!`` forms wrap those), whatever the field,
before matching (opencost/opencost ``core/pkg/filter/transform/unallocated.go``, a pass of
``core/pkg/opencost/allocationmatcher.go``): ``controllerKind:"__unallocated__"`` keeps the
allocations without a controller, ``!:`` the others; a label alias or ``label[<key>]`` keeps
those without the label (OpenCost's alias pass adds "neither label nor annotation" for it).
``services`` is a list in OpenCost (``stringslicematcher.go``): an allocation without
Services contains only ``""`` and has no element to start or end with anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

STRING_FIELDS = ("cluster", "node", "namespace", "pod", "container")
CONTROLLER_FIELDS = ("controllerKind", "controllerName")
KEPT_ALIASES = ("team",)
# OpenCost's label aliases and its default label names (LabelConfig)
LABEL_ALIASES = {"department": "department", "environment": "env", "owner": "owner"}
LABEL_ALIASES["product"] = "app"
EMPTY_FIELDS = ("services", "provider")  # not watched: an allocation has none
SLICE_FIELDS = ("services",)  # a list in OpenCost: its prefix/suffix match needs an element
UNALLOCATED = "__unallocated__"  # the empty value (OpenCost's transform/unallocated.go)
MAP_FIELDS = ("label", "annotation")
FIELDS = (*STRING_FIELDS, *CONTROLLER_FIELDS, *KEPT_ALIASES, *LABEL_ALIASES, *EMPTY_FIELDS)
OPS = ("!~>:", "!<~:", "!~:", "~>:", "<~:", "!:", "~:", ":")
IDENT = re.compile(r"[0-9A-Za-z_-]+")
# a token between delimiters: its opening character -> (closing one, kind, what it is called)
DELIMITED = {'"': ('"', "str", "string"), "[": ("]", "key", "access")}
MAX_LENGTH = 4096  # a filter longer than this is refused before it is parsed
MAX_DEPTH = 32  # nested parentheses

# (field, label key or None) -> the value of the allocation ("" when it has none)
Lookup = Callable[[str, str | None], str]


class FilterError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Comparison:
    field: str
    key: str | None
    op: str
    values: tuple[str, ...]

    def matches(self, get: Lookup) -> bool:
        have = get(self.field, self.key)
        base = self.op.removeprefix("!")
        if self.field in SLICE_FIELDS and base in ("<~:", "~>:"):
            hit = False  # no element (stringslicematcher.go: an empty slice matches none)
        else:
            hit = any(_test(base, have, v) for v in self.values)
        return not hit if self.op.startswith("!") else hit


def _test(op: str, have: str, value: str) -> bool:
    if op == ":":
        return have == value
    if op == "~:":
        return value in have
    if op == "<~:":
        return have.startswith(value)
    return have.endswith(value)  # "~>:"


@dataclass(frozen=True, slots=True)
class Group:
    op: str  # "+" and, "|" or
    parts: tuple[Node, ...]

    def matches(self, get: Lookup) -> bool:
        if self.op == "+":
            return all(p.matches(get) for p in self.parts)
        return any(p.matches(get) for p in self.parts)


@dataclass(frozen=True, slots=True)
class Everything:
    def matches(self, get: Lookup) -> bool:
        return True


Node = Comparison | Group | Everything


@dataclass(slots=True)
class _Tokens:
    items: list[tuple[str, str]]  # (kind, text)
    fields: tuple[str, ...] = FIELDS  # the fields a comparison may name
    maps: tuple[str, ...] = MAP_FIELDS  # those of them with a [<key>]
    at: int = 0
    depth: int = 0

    def peek(self) -> tuple[str, str]:
        return self.items[self.at]

    def take(self, kind: str, message: str) -> str:
        got_kind, text = self.items[self.at]
        if got_kind != kind:
            where = "at end" if got_kind == "eof" else f"at '{text}'"
            raise FilterError(f"{where}: {message}")
        self.at += 1
        return text


def _lex(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c in " \t\n\r":
            i += 1
        elif c in "(),+|":
            out.append((c, c))
            i += 1
        elif c in DELIMITED:
            close, kind, what = DELIMITED[c]
            end = text.find(close, i + 1)
            if end < 0:
                raise FilterError(f"unterminated {what} starting at {i}")
            out.append((kind, text[i + 1 : end]))
            i = end + 1
        elif m := IDENT.match(text, i):
            out.append(("ident", m[0]))
            i = m.end()
        else:
            op = next((o for o in OPS if text.startswith(o, i)), None)
            if op is None:
                raise FilterError(f"unexpected character at position {i}")
            out.append(("op", op))
            i += len(op)
    out.append(("eof", ""))
    return out


def parse(text: str, fields: tuple[str, ...] = FIELDS, maps: tuple[str, ...] = MAP_FIELDS) -> Node:
    """The filter as a tree; raises :class:`FilterError` (OpenCost: 400 "Invalid filter").
    ``fields`` and ``maps``: the fields of the filter's kind (an allocation's by default;
    an asset's: costsvc/opencost/assets.py)."""
    if len(text) > MAX_LENGTH:
        raise FilterError(f"longer than {MAX_LENGTH} characters")
    tokens = _Tokens(_lex(text), fields, maps)
    if tokens.peek()[0] == "eof":
        return Everything()
    node = _filter(tokens)
    if tokens.peek()[0] == ")":
        raise FilterError("Found ')' without matching '('")
    if tokens.peek()[0] != "eof":
        raise FilterError(f"at '{tokens.peek()[1]}': expected '+', '|' or the end")
    return node


def _element(tokens: _Tokens) -> Node:
    if tokens.peek()[0] == "(":
        tokens.at += 1
        tokens.depth += 1
        if tokens.depth > MAX_DEPTH:
            raise FilterError(f"more than {MAX_DEPTH} nested parentheses")
        node = _filter(tokens)
        tokens.take(")", "Found '(' without matching ')'")
        tokens.depth -= 1
        return node
    return _comparison(tokens)


def _filter(tokens: _Tokens) -> Node:
    first = _element(tokens)
    kind = tokens.peek()[0]
    if kind not in ("+", "|"):
        return first
    parts = [first]
    while tokens.peek()[0] == kind:
        tokens.at += 1
        parts.append(_element(tokens))
    after = tokens.peek()[0]
    if after in ("+", "|"):
        raise FilterError(f'Found "{after}", Expected "{kind}"')
    return Group(kind, tuple(parts))


def _comparison(tokens: _Tokens) -> Comparison:
    name = tokens.take("ident", "expect filter field")
    key: str | None = None
    if name in tokens.maps:
        if tokens.peek()[0] == "key":
            key = tokens.take("key", "expect key")
    elif name not in tokens.fields:
        raise FilterError(f"at '{name}': expect filter field")
    op = tokens.take("op", "expect filter op")
    values = [tokens.take("str", "expect string value")]
    while tokens.peek()[0] == ",":
        tokens.at += 1
        values.append(tokens.take("str", "expect string value"))
    return Comparison(name, key, op, tuple("" if v == UNALLOCATED else v for v in values))


def comparisons(node: Node) -> list[Comparison]:
    """Every comparison of the tree, in order."""
    if isinstance(node, Comparison):
        return [node]
    if isinstance(node, Group):
        return [c for p in node.parts for c in comparisons(p)]
    return []
