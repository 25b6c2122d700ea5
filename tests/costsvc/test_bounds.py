"""Bounded inputs: prices, budgets, carbon intensities and quotas within documented
bounds — refused with a 4xx naming the field at the API and exit 2 (one line) at start-up;
every refusal quotes at most 64 characters of an input (every operation, every parameter);
a spec or cost model that is not UTF-8 is one line and exit 2; and no cost-model document
whatever gives a 5xx or a traceback (a property test)."""

from __future__ import annotations

import contextlib
import json
import random
import string
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from costsvc import cli
from costsvc.advice.kube_owners import quota_limits
from costsvc.advice.quotas import figures, quantity
from costsvc.kit.quoting import SHOWN
from costsvc.rules.cost_model import CostModelError, load, parse
from exporter import cli as exporter_cli
from tests.costsvc.apiserver import NOV20, Api, Clock, serve
from tests.costsvc.conftest import fresh_database
from tests.costsvc.history import HOUR, MODEL, ingest_with
from tests.costsvc.test_api_fuzz import operations
from tests.prom import Prometheus

H100 = "NVIDIA H100 80GB HBM3"


def document(**price: Any) -> dict[str, Any]:
    """A cost model of one price (``price``'s fields), and a carbon entry."""
    return {
        "versions": [
            {
                "effective_from": "2026-11-01T00:00:00Z",
                "prices": [{"model": H100, **price}],
            }
        ],
    }


AMORTISED = {"purchase_price": "30000", "depreciation_months": 36}
REFUSED = [  # (price fields, the field the refusal names)
    ({"hourly": "99999999999999999999999999999"}, "versions[0].prices[0].hourly"),
    ({"hourly": "1e15"}, "versions[0].prices[0].hourly"),
    ({"hourly": 1e15}, "versions[0].prices[0].hourly"),
    ({"hourly": "1000000000"}, "versions[0].prices[0].hourly"),
    ({"hourly": "2.5000001"}, "versions[0].prices[0].hourly"),
    ({"hourly": "NaN"}, "versions[0].prices[0].hourly"),
    ({"hourly": "Infinity"}, "versions[0].prices[0].hourly"),
    ({"hourly": "2.5", "discount": "0.1234567"}, "versions[0].prices[0].discount"),
    ({"hourly": "2.5", "idle_watts": "100001"}, "versions[0].prices[0].idle_watts"),
    ({"hourly": "2.5", "model": "x" * 254}, "versions[0].prices[0].model"),
    ({"hourly": "2.5", "node_pool": "x" * 254}, "versions[0].prices[0].node_pool"),
    (
        {"amortised": {**AMORTISED, "purchase_price": "1e12"}},
        "versions[0].prices[0].amortised.purchase_price",
    ),
    (
        {"amortised": {**AMORTISED, "depreciation_months": 1201}},
        "versions[0].prices[0].amortised.depreciation_months",
    ),
    (
        {"amortised": {**AMORTISED, "power_watts": "100001"}},
        "versions[0].prices[0].amortised.power_watts",
    ),
    (
        {"amortised": {**AMORTISED, "kwh_price": "1000000"}},
        "versions[0].prices[0].amortised.kwh_price",
    ),
    (
        {"amortised": {**AMORTISED, "overhead_factor": "101"}},
        "versions[0].prices[0].amortised.overhead_factor",
    ),
    (  # each field within its bound, the price per GPU-hour they make is not
        {"amortised": {"purchase_price": "999999999999", "depreciation_months": 1}},
        "price per GPU-hour must be below 1000000000",
    ),
]
CARBON_REFUSED = [
    ({"grams_per_kwh": "10001"}, "carbon[0].grams_per_kwh"),
    ({"grams_per_kwh": "1.0001"}, "carbon[0].grams_per_kwh"),
    ({"grams_per_kwh": "400", "pue": "11"}, "carbon[0].pue"),
    ({"grams_per_kwh": "400", "cluster": "c" * 254}, "carbon[0].cluster"),
]


def with_carbon(**entry: Any) -> dict[str, Any]:
    return {
        **document(hourly="2.5"),
        "carbon": [{"effective_from": "2026-11-01T00:00:00Z", **entry}],
    }


@pytest.mark.parametrize(("price", "field"), REFUSED)
def test_prices_out_of_bounds_are_refused_naming_the_field(
    price: dict[str, Any], field: str
) -> None:
    with pytest.raises(CostModelError) as refused:
        parse(document(**price), "request body")
    assert str(refused.value).startswith("request body: ") and field in str(refused.value)


@pytest.mark.parametrize(("entry", "field"), CARBON_REFUSED)
def test_carbon_intensities_out_of_bounds_are_refused_naming_the_field(
    entry: dict[str, Any], field: str
) -> None:
    with pytest.raises(CostModelError) as refused:
        parse(with_carbon(**entry))
    assert field in str(refused.value)


def test_the_largest_prices_within_bounds_price_an_hour() -> None:
    top = parse(document(hourly="999999999.999999", idle_watts="100000"))
    assert top.prices_for(HOUR, [(H100, None)]) == {(H100, None): 999_999_999_999_999}
    dear = parse(
        document(
            amortised={
                "purchase_price": "999999999999.999999",
                "depreciation_months": 1200,
                "power_watts": "100000",
                "kwh_price": "999999.999999",
                "overhead_factor": "9",
            }
        )
    )
    assert 0 < dear.prices_for(HOUR, [(H100, None)])[(H100, None)] < 10**15
    assert parse(with_carbon(grams_per_kwh="10000", pue="10")).carbon_at(HOUR, "c") > 0


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4", Decimal(4)),
        ("500m", Decimal("0.5")),
        ("100k", Decimal(100_000)),
        ("100001", None),  # more GPUs than one quota may sensibly limit: no limit
        ("1G", None),
        ("9" * 40, None),
        ("1" + "0" * 70, None),  # longer than the column that keeps it
        ("0." + "0" * 70 + "1", None),
    ],
)
def test_quota_quantities_are_read_within_bounds(text: str, value: Decimal | None) -> None:
    assert quantity(text) == value
    held = {("ns", "nvidia.com/gpu"): Decimal(1)}
    (row,) = figures([("ns", "requests.nvidia.com/gpu", text, None)], held, {}, {})
    assert row.hard == value


def test_a_resource_quota_from_the_api_is_kept_within_its_columns() -> None:
    """A ResourceQuota as the Kubernetes API gives it (any text a tenant's admin wrote): a
    quantity too long for its column is kept cut and marked, and never reads as another."""
    long = "0." + "0" * 70 + "1"
    limits = quota_limits(
        {
            "spec": {"hard": {"requests.nvidia.com/gpu": long, "nvidia.com/mig-1g.10gb": "2"}},
            "status": {"used": {"requests.nvidia.com/gpu": "1" * 100}},
        }
    )
    hard, used = limits["requests.nvidia.com/gpu"]
    assert len(hard) == 64 and hard.endswith("…") and quantity(hard) is None
    assert used is not None and len(used) == 64 and quantity(used) is None
    assert limits["nvidia.com/mig-1g.10gb"] == ("2", None)


# -- start-up: exit 2 and one line ------------------------------------------------------------


def run_cli(
    main: Any, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[str]]:
    code = main(argv)
    err = capsys.readouterr().err
    return code, err.splitlines()


@pytest.mark.parametrize("command", [["ingest"], ["serve"], ["cost-model", "show"]])
def test_a_price_out_of_bounds_fails_start_up_naming_the_field(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "cost-model.yaml"
    bad.write_text(yaml.safe_dump(document(hourly="99999999999999999999999999999")))
    monkeypatch.setenv("COSTSVC_DATABASE_URL", f"sqlite:///{tmp_path / 'x.db'}")
    monkeypatch.setenv("COSTSVC_COST_MODEL", str(bad))
    code, lines = run_cli(cli.main, command, capsys)
    assert code == 2
    assert len(lines) == 1 and "versions[0].prices[0].hourly" in lines[0], lines


def test_files_that_are_not_utf8_are_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("# coût\n".encode("latin-1") + b"versions: []\n")
    monkeypatch.setenv("COSTSVC_DATABASE_URL", f"sqlite:///{tmp_path / 'x.db'}")
    monkeypatch.setenv("COSTSVC_COST_MODEL", str(latin1))
    code, lines = run_cli(cli.main, ["ingest"], capsys)
    assert (code, len(lines)) == (2, 1) and "not UTF-8" in lines[0], lines
    monkeypatch.delenv("COSTSVC_COST_MODEL")
    code, lines = run_cli(cli.main, ["cost-model", "import", str(latin1)], capsys)
    assert (code, len(lines)) == (2, 1) and "not UTF-8" in lines[0], lines
    code, lines = run_cli(
        exporter_cli.main, ["--simulate", str(latin1), "--web.listen-address", ":0"], capsys
    )
    assert (code, len(lines)) == (2, 1) and "not UTF-8" in lines[0], lines


# -- the API: 4xx naming the field, never a 5xx ------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(
    request: pytest.FixtureRequest, prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    with fresh_database(request.param, request, tmp_path_factory.mktemp("bounds")) as url:
        ingest_with(prometheus.url, url, MODEL, [HOUR])
        with serve(url, Clock(NOV20), ["nlp"]) as running:
            yield running


@pytest.mark.parametrize(("price", "field"), REFUSED[:3] + REFUSED[-1:])
def test_the_api_refuses_a_price_out_of_bounds_naming_the_field(
    api: Api, price: dict[str, Any], field: str
) -> None:
    r = api.http.put("/v1/cost-model", json=document(**price), headers=api.auth("admin"))
    assert r.status_code == 400 and field in r.json()["detail"], r.text
    assert api.get("/v1/cost-model", "admin").status_code == 200


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"amount": "1000000000001"}, "amount"),
        ({"amount": "1e15"}, "amount"),
        ({"amount": "99999999999999999999999999999"}, "amount"),
        ({"amount": "1.0000001"}, "amount"),
        ({"energy_kwh": "1000000001"}, "energy_kwh"),
        ({"thresholds": [11]}, "thresholds"),
        ({"thresholds": [0.5] * 11}, "thresholds"),
    ],
)
def test_the_api_refuses_a_budget_out_of_bounds_naming_the_field(
    api: Api, change: dict[str, Any], field: str
) -> None:
    body = {"team": "nlp", "amount": "100", **change}
    r = api.http.post("/v1/budgets", json=body, headers=api.auth("finance"))
    assert r.status_code == 422 and field in {e["loc"][-1] for e in r.json()["detail"]}, r.text


def _distinct(n: int, seed: int) -> str:
    """``n`` characters of which no 65 in a row occur twice, or in any message by chance."""
    rnd = random.Random(seed)
    return "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(n))


def quoted_too_much(sent: str, answer: str) -> str | None:
    """A run of more than SHOWN characters of ``sent`` that ``answer`` repeats."""
    n = SHOWN + 1
    grams = {answer[i : i + n] for i in range(len(answer) - n + 1)}
    return next(
        (sent[i : i + n] for i in range(len(sent) - n + 1) if sent[i : i + n] in grams), None
    )


LONG = _distinct(1800, 24)
VARIANTS = [  # what reaches each route's own checks: plain, number-, time- and filter-shaped
    LONG,
    "1" + LONG,
    LONG + "h",
    "2026-11-01T00:00:00Z" + LONG,
    "2026-11",
    "label:" + LONG,
    f'team:"{LONG}"',
    "x," + LONG,
]


@pytest.mark.parametrize("api", ["sqlite"], indirect=True)  # no message depends on the database
def test_no_refusal_quotes_more_than_64_characters_of_an_input(api: Api) -> None:
    spec = api.http.get("/openapi.json").json()
    ops = operations(spec)
    checked = 0
    for method, path, fields, template in ops:
        for where, name in fields:
            for value in VARIANTS:
                if method == "DELETE":
                    continue  # a long name names no token or budget: nothing to refuse
                url = path
                for p_where, p_name in fields:
                    if p_where == "path":
                        fill = value if (p_where, p_name) == (where, name) else "1"
                        url = url.replace("{" + p_name + "}", quote(fill, safe=""))
                if where == "query":
                    url += f"?{quote(name)}={quote(value, safe='')}"
                kwargs: dict[str, Any] = {"headers": api.auth("admin")}
                if template is not None:
                    body = json.loads(json.dumps(template))
                    if where == "body":
                        body[name] = value
                        body[LONG] = 1  # and a key of its own
                    kwargs["json"] = body
                r = api.http.request(method, url, **kwargs)
                assert r.status_code < 500, (method, path, name, r.text[:300])
                if r.status_code >= 400:
                    checked += 1
                    echo = quoted_too_much(value, r.text)
                    assert echo is None, (method, path, where, name, r.status_code, r.text[:300])
    assert checked > 100


# -- a property: no cost-model document gives a 5xx or a traceback ------------------------------

SPECIAL = [
    "99999999999999999999999999999",
    "1e15",
    "1E+400",
    "1e-30",
    "-0",
    "NaN",
    "sNaN",
    "Infinity",
    "0.0000005",
    "999999999.9999999",
    "2026-11-01T00:00:00Z",
    "9999-12-31T23:00:00+14:00",
    "0001-01-01T00:00:00-14:00",
    "*",
    "",
    "x" * 300,
    "\u2028",
]
LEAVES = st.one_of(
    st.sampled_from(SPECIAL),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
    st.none() | st.booleans() | st.text(max_size=20),
)
JSON = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
SLOTS = [  # where a mutation lands: the fields of a real document
    ("currency",),
    ("policies", "idle_policy"),
    ("labels", "team"),
    ("versions",),
    ("versions", 0, "effective_from"),
    ("versions", 0, "prices"),
    ("versions", 0, "prices", 0, "hourly"),
    ("versions", 0, "prices", 0, "discount"),
    ("versions", 0, "prices", 0, "model"),
    ("versions", 0, "prices", 0, "amortised"),
    ("versions", 0, "prices", 0, "amortised", "purchase_price"),
    ("versions", 0, "prices", 0, "amortised", "kwh_price"),
    ("versions", 0, "prices", 0, "amortised", "overhead_factor"),
    ("versions", 0, "prices", 0, "amortised", "depreciation_months"),
    ("carbon", 0, "grams_per_kwh"),
    ("carbon", 0, "pue"),
    ("carbon", 0, "effective_from"),
]


def base_document() -> dict[str, Any]:
    doc = MODEL.document()
    doc["carbon"] = [{"effective_from": "2026-11-01T00:00:00Z", "grams_per_kwh": "400"}]
    amortised = {**AMORTISED, "power_watts": "700", "kwh_price": "0.2"}
    doc["versions"][0]["prices"].append({"model": "*", "amortised": amortised})
    return doc


def mutated(mutations: list[tuple[tuple[Any, ...], Any]]) -> Any:
    doc: Any = base_document()
    for slot, value in mutations:
        if not slot:
            return value
        node = doc
        for step in slot[:-1]:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                break
        else:
            with contextlib.suppress(IndexError, TypeError):
                node[slot[-1]] = value
    return doc


DOCUMENTS = st.lists(st.tuples(st.sampled_from([*SLOTS, ()]), JSON), min_size=1, max_size=3).map(
    mutated
)


ISSUE = [  # the hostile documents, every run
    mutated([(("versions", 0, "prices", 0, "hourly"), "99999999999999999999999999999")]),
    mutated([(("versions", 0, "prices", 0, "hourly"), "1e15")]),
    mutated([(("versions", 0, "prices", 0, "hourly"), 10**30)]),
]


@given(DOCUMENTS)
@example(ISSUE[0])
@example(ISSUE[1])
@example(ISSUE[2])
@settings(max_examples=200, deadline=None, database=None)
def test_any_cost_model_document_is_a_model_or_one_named_error(doc: Any) -> None:
    try:
        model = parse(doc, "doc")
    except CostModelError as exc:
        refusal = str(exc)
        assert refusal.startswith("doc: ") and "\n" not in refusal
        return
    for version in model.versions:  # an accepted model prices every hour it covers
        for price in version.prices:
            assert 0 < price.micro_per_hour() < 10**15
            assert 0 <= price.micro_per_kwh() < 10**15
    for entry in model.carbon:
        assert 0 <= entry.ug_per_kwh() < 10**12


ALLOCATION = "/allocation?window=2026-11-10T05:00:00Z,2026-11-10T06:00:00Z"


def test_no_cost_model_document_gives_a_5xx(api: Api, tmp_path: Path) -> None:
    admin = api.auth("admin")
    model_file = tmp_path / "cost-model.yaml"

    @given(DOCUMENTS)
    @example(ISSUE[0])
    @example(ISSUE[1])
    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(doc: Any) -> None:
        # json.dumps writes NaN/Infinity as a JavaScript client would (no JSON: refused)
        body = json.dumps(doc)
        typed = {**admin, "Content-Type": "application/json"}
        r = api.http.put("/v1/cost-model", content=body, headers=typed)
        assert r.status_code in (200, 400, 422), (r.status_code, r.text[:300])
        for path in (
            "/v1/cost-model",
            "/allocation?window=2026-11-10T05:00:00Z,2026-11-10T06:00:00Z",
        ):
            assert api.http.get(path, headers=admin).status_code < 500, path
        model_file.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
        try:
            load(model_file)  # the operator's file: a model or one named error
        except CostModelError as exc:
            assert "\n" not in str(exc)  # noqa: PT017

    check()
