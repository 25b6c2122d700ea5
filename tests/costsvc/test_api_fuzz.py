"""Property: arbitrary text (NUL, CR/LF, unpaired surrogates, 1 MB strings, extreme dates
with offsets, near-misses of valid values) in any query parameter, path parameter or body
field of any operation of the OpenAPI description gets an answer below 500 — on SQLite and
on PostgreSQL, over real HTTP — and a refusal is short (it never echoes a large input).

The operations and their parameters come from the app's own ``/openapi.json``, so a route
added later is fuzzed without touching this file. Bounded: a fixed number of examples."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import HOUR3, MODEL, ingest_with
from tests.prom import Prometheus

SPECIAL = [
    "",
    "\x00",
    "a\x00b",
    "a\r\nb",
    "\n",
    "\ud800",
    "\udfff",
    "x" * 2**20,
    "é" * 5000,
    "9999-12-31T23:00:00-14:00",
    "0001-01-01T00:00:00+14:00",
    "0001-01-01T00:00:00Z",
    "2026-11-10T07:00:00.000001Z",
    "2026-11-10T07:00:00+05:30",
    "today\n",
    "month\x00",
    "2026-11\n",
    "2026-00",
    "99999-01",
    "-1",
    "0",
    "2147483648",
    "1e309",
    "NaN",
    "Infinity",
    "team,team",
    ",,,,",
    "a" * 300,
    "__idle__",
    '"; filename="x',
    "%00",
    "../../etc/passwd",
    "{}",
    "[]",
]
TEXT = st.one_of(
    st.sampled_from(SPECIAL),
    st.text(st.characters(exclude_categories=()), max_size=40),
    st.text(alphabet="0123456789-:TZ+.,", max_size=30),
)
KEEP = {"admin", "finance", "prometheus", "team-a"}  # tokens the run itself needs


def _encode(value: str) -> str:
    """Percent-encoded UTF-8, surrogates as the bytes a careless client would send."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        schema = spec["components"]["schemas"][name]
    return schema


def _bodies(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A valid body per schema name, which the test then spoils one field at a time."""
    return {
        "BudgetIn": {"team": "fuzz", "amount": "1", "currency": "USD"},
        "TokenIn": {"name": "fuzz", "role": "finance"},
    }


def operations(spec: dict[str, Any]) -> list[tuple[str, str, list[tuple[str, str]], Any]]:
    """(method, path, [(where, name)], body template or None) of every operation."""
    out = []
    templates = _bodies(spec)
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            fields = [(p["in"], p["name"]) for p in op.get("parameters", [])]
            body: Any = None
            content = op.get("requestBody", {}).get("content", {}).get("application/json")
            if content:
                ref = content["schema"].get("$ref", "")
                name = ref.rsplit("/", 1)[-1]
                body = templates.get(name, MODEL.document())
                schema = _resolve(spec, content["schema"])
                keys = schema.get("properties") or body
                fields += [("body", k) for k in keys]
                fields.append(("body", "\x00key"))  # a key of its own
            if fields:
                out.append((method.upper(), path, fields, body))
    return out


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(
    request: pytest.FixtureRequest, prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    work = tmp_path_factory.mktemp("fuzz")
    with fresh_database(request.param, request, work) as url:
        ingest_with(prometheus.url, url, MODEL, [HOUR3])
        model = work / "cost-model.yaml"
        model.write_text(yaml.safe_dump(MODEL.document()))
        with serve(url, Clock(NOV20), ["a"], cost_model=model) as running:
            yield running


@pytest.mark.parametrize("who", ["admin", "team:a"])
def test_no_input_gets_a_5xx(api: Api, who: str) -> None:
    spec = api.http.get("/openapi.json").json()
    ops = operations(spec)
    assert len(ops) >= 12
    assert {m for m, *_ in ops} >= {"GET", "POST", "PUT", "DELETE"}
    headers = api.auth(who)

    @given(op=st.sampled_from(ops), data=st.data())
    @settings(
        max_examples=250,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(op: tuple[str, str, list[tuple[str, str]], Any], data: st.DataObject) -> None:
        method, path, fields, template = op
        where, name = data.draw(st.sampled_from(fields))
        value = data.draw(TEXT)
        if method == "DELETE" and value in KEEP:
            return
        in_url = value[:20_000]  # the client's own URL limit is 64 KiB; ours is 8 KiB
        concrete = path
        for p_where, p_name in fields:
            if p_where == "path":
                filler = in_url if (p_where, p_name) == (where, name) else "1"
                concrete = concrete.replace("{" + p_name + "}", _encode(filler))
        url = concrete
        if where == "query":
            url += f"?{_encode(name)}={_encode(in_url)}"
        kwargs: dict[str, Any] = {}
        if template is not None:
            body = json.loads(json.dumps(template))
            if where == "body":
                body[name] = value
            kwargs["content"] = json.dumps(body).encode()  # surrogates as \\ud800 escapes
            kwargs["headers"] = {**headers, "Content-Type": "application/json"}
        else:
            kwargs["headers"] = headers
        r = api.http.request(method, url, **kwargs)
        assert r.status_code < 500, (method, url[:200], where, name, repr(value[:80]), r.text[:500])
        if r.status_code >= 400:
            assert len(r.content) < 4096, (method, path, where, name, len(r.content))

    check()
