"""OpenCost's /allocation parameters and answer shape, by small tables whose answers are
computed by hand (costsvc/opencost/; its filter language: test_opencost_filters.py). Forms from
opencost/opencost: ``core/pkg/opencost/window.go``, ``pkg/costmodel/aggregation.go``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costsvc.kit.windows import BadParameter, Window, parse_window
from costsvc.opencost.params import (
    parse_accumulate,
    parse_bool,
    parse_step,
    plan,
    round_out,
    set_windows,
)
from costsvc.opencost.podlabels import Labelled, with_labels
from costsvc.opencost.shape import (
    LABEL_PREFIX,
    Aggregate,
    Options,
    Row,
    label_column,
    response_json,
    to_json,
)
from costsvc.rules.chargeback import IDLE, UNALLOCATED

NOW = datetime(2026, 11, 18, 10, 37, 12, tzinfo=UTC)  # a Wednesday
DAY_ = timedelta(days=1)


def t(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("window", "start", "end"),
    [
        ("today", "2026-11-18", "2026-11-19"),
        ("yesterday", "2026-11-17", "2026-11-18"),
        ("week", "2026-11-15", "2026-11-18 10:37:12"),  # since Sunday (Go's week)
        ("lastweek", "2026-11-08", "2026-11-15"),
        ("month", "2026-11-01", "2026-11-18 10:37:12"),
        ("lastmonth", "2026-10-01", "2026-11-01"),
        ("7d", "2026-11-12", "2026-11-19"),  # today and the 6 days before
        ("24h", "2026-11-17 11:00", "2026-11-18 11:00"),  # to the next full hour
        ("30m", "2026-11-18 10:08", "2026-11-18 10:38"),
        ("2w", "2026-11-05", "2026-11-19"),  # weeks end today
        ("1d offset 1d", "2026-11-16 10:37:12", "2026-11-17 10:37:12"),
        ("1586822400,1586908800", "2020-04-14", "2020-04-15"),
        ("1586822400-1586908800", "2020-04-14", "2020-04-15"),
        ("2020-04-01T00:00:00Z,2020-04-03T00:00:00Z", "2020-04-01", "2020-04-03"),
    ],
)
def test_windows_as_opencost_parses_them(window: str, start: str, end: str) -> None:
    assert parse_window(window, NOW) == Window(t(start), t(end))


@pytest.mark.parametrize(
    "window",
    [
        "",
        "fortnight",
        "7x",
        "-1d",
        "7 d",
        "2020-04-01T00:00:00+02:00,2020-04-02T00:00:00Z",  # OpenCost's pattern wants Z
        "2020-13-01T00:00:00Z,2020-14-01T00:00:00Z",
        "1600000000,1500000000",  # negative
        "999999999999999,1",
        "100000d",
        "99999999999999w",  # past what a clock holds: illegal, never an overflow
        "1d offset 99999999999w",
        "0001-01-01T00:00:00Z,0001-01-02T00:00:00Z",  # before 1970
    ],
)
def test_illegal_windows(window: str) -> None:
    with pytest.raises(BadParameter) as caught:
        parse_window(window, NOW)
    assert caught.value.plain  # OpenCost answers these with http.Error (text)
    assert str(caught.value).startswith("Invalid 'window' parameter: ")


DAY = Window(t("2026-11-10"), t("2026-11-11"))


@pytest.mark.parametrize(
    ("step", "hours"),
    [(None, 24), ("", 24), ("1h", 1), ("hour", 1), ("6h", 6), ("2h0m", 2), ("90m", None)],
)
def test_steps(step: str | None, hours: int | None) -> None:
    if hours is None:
        with pytest.raises(BadParameter, match="whole number of hours"):
            parse_step(step, DAY)
    else:
        assert parse_step(step, DAY) == timedelta(hours=hours)


def test_step_keywords_and_limits() -> None:
    month = Window(t("2026-11-01"), t("2026-12-01"))
    assert parse_step("day", month) == parse_step("1d", month) == timedelta(days=1)
    assert parse_step("month", month) == timedelta(days=1)  # OpenCost: daily sets
    assert parse_step("week", month) == parse_step("1w", month) == timedelta(days=7)
    assert parse_step("3600s", month) == timedelta(hours=1)
    with pytest.raises(BadParameter, match="invalid step"):
        parse_step("soon", month)
    two_months = Window(t("2026-01-01"), t("2026-03-01"))
    with pytest.raises(BadParameter, match="at most 1000"):
        plan(two_months, parse_step("1h", two_months))
    assert [(w.start, w.end) for w in set_windows(month, timedelta(days=14))] == [
        (t("2026-11-01"), t("2026-11-15")),
        (t("2026-11-15"), t("2026-11-29")),
        (t("2026-11-29"), t("2026-12-13")),  # OpenCost's last set runs on past the window
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("1", True), ("T", True), ("FALSE", False), ("yes", False), (None, False)],
)
def test_booleans_as_strconv_parse_bool(text: str | None, value: bool) -> None:
    assert parse_bool(text) is value


def test_accumulate() -> None:
    """OpenCost's resolveAccumulateFromQuery / resolveAccumulateOption."""
    assert parse_accumulate("all") == parse_accumulate("true") == parse_accumulate("1") == "all"
    assert parse_accumulate("nope") == parse_accumulate(None) == ""  # not a bool: none
    assert parse_accumulate(" Day ") == "day" and parse_accumulate("QUARTER") == "quarter"
    assert parse_accumulate("weeknow") == ""  # the new UI's option: OpenCost knows it not
    # accumulateBy, when given, decides
    assert parse_accumulate("false", "all") == "all" and parse_accumulate("true", "none") == ""
    assert parse_accumulate("true", "week") == "week"
    with pytest.raises(BadParameter, match="Invalid 'accumulateBy' parameter"):
        parse_accumulate(None, "sometimes")


WEEK_OF_18TH = Window(t("2026-11-12"), t("2026-11-19"))  # 7d on the 18th (a Wednesday)


@pytest.mark.parametrize(
    ("accumulate", "step", "sets", "answer"),
    [
        # resolveStepFromQuery: the sets an accumulation is made of, without a step
        ("", None, [("2026-11-12", "2026-11-19")], [("2026-11-12", "2026-11-19")]),
        ("all", "1d", [("2026-11-12", "2026-11-13")] * 1, [("2026-11-12", "2026-11-19")]),
        ("day", None, [("2026-11-12", "2026-11-13")], [("2026-11-12", "2026-11-13")]),
        # hourly sets summed per day: 168 sets, 7 answers
        ("day", "1h", [("2026-11-12", "2026-11-12 01:00")], [("2026-11-12", "2026-11-13")]),
        # weeks start on Sunday: the 8th to the 22nd, two weekly sets
        ("week", None, [("2026-11-08", "2026-11-15")], [("2026-11-08", "2026-11-15")]),
        # daily sets summed per calendar month: November, all of it
        ("month", None, [("2026-11-01", "2026-11-02")], [("2026-11-01", "2026-12-01")]),
        ("quarter", "week", [("2026-10-01", "2026-10-02")], [("2026-10-01", "2027-01-01")]),
        ("hour", "1d", [("2026-11-12", "2026-11-12 01:00")], [("2026-11-12", "2026-11-12 01:00")]),
    ],
)
def test_accumulation_sets_as_opencost_makes_them(
    accumulate: str, step: str | None, sets: list[tuple[str, str]], answer: list[tuple[str, str]]
) -> None:
    made = plan(WEEK_OF_18TH, parse_step(step, WEEK_OF_18TH, accumulate), accumulate, bool(step))
    first = made.sets[0]
    assert (first.start, first.end) == (t(sets[0][0]), t(sets[0][1]))
    window, _ = made.groups[0]
    assert (window.start, window.end) == (t(answer[0][0]), t(answer[0][1]))
    covered = [i for _, ix in made.groups for i in ix]
    assert covered == sorted(covered) and len(set(covered)) == len(covered)
    counts = {"": 1, "all": 1, "day": 7, "week": 2, "month": 1, "quarter": 1, "hour": 168}
    assert len(made.groups) == counts[accumulate]


def test_windows_rounded_out_to_calendar_periods() -> None:
    w = Window(t("2026-11-17 11:00"), t("2026-11-18 11:00"))  # 24h on the 18th
    assert round_out(w, "day") == Window(t("2026-11-17"), t("2026-11-19"))
    assert round_out(w, "hour") == w
    assert round_out(w, "week") == Window(t("2026-11-15"), t("2026-11-22"))
    assert round_out(w, "month") == Window(t("2026-11-01"), t("2026-12-01"))
    dec = Window(t("2026-12-30"), t("2027-01-01"))
    assert round_out(dec, "quarter") == dec.__class__(t("2026-10-01"), t("2027-01-01"))
    # a weekly step starts on the Sunday before (OpenCost's alignStepStart)
    tuesday = Window(t("2026-11-10"), t("2026-11-24"))
    assert [s.start for s in plan(tuesday, parse_step("week", tuesday), stepped=True).sets] == [
        t("2026-11-08"),
        t("2026-11-15"),
        t("2026-11-22"),
    ]
    # every window form is an answer without a step: one set, whatever its length
    for text in ("month", "week", "30m", "today", "1d offset 1d"):
        span = parse_window(text, NOW)
        assert [(s.start, s.end) for s in plan(span, parse_step(None, span)).sets] == [
            (span.start, span.end)
        ]


H = t("2026-11-10 05:00")


def holder(pod: str, allocated: int, idle: int = 0, node: str = "n1", cluster: str = "c1") -> Row:
    values = {"cluster": cluster, "node": node, "namespace": "ns", "pod": pod, "team": "t"}
    return Row(0, values, allocated, allocated // 2, allocated // 2, idle, 1_000_000, H, H)


def idle_line(idle: int, node: str = "n1", cluster: str = "c1", hours: int = 0) -> Row:
    values = {"cluster": cluster, "node": node, "namespace": "", "pod": "", "team": IDLE}
    return Row(0, values, 0, 0, 0, idle, hours, H, H)


def allocation_sets(*args: Any) -> list[dict[str, Any]]:
    """The answer's data, numbers as Decimal: exact, as written."""
    text = response_json(*args)
    parsed = json.loads(text, parse_float=Decimal, parse_int=Decimal)
    assert list(parsed) == ["code", "status", "data"]
    data: list[dict[str, Any]] = parsed["data"]
    return data


def money(one: dict[str, Any], field: str) -> dict[str, Decimal]:
    return {name: a[field] for name, a in one.items()}


POD = [Aggregate("pod", "pod")]
ONE_HOUR = [Window(H, H + timedelta(hours=1))]


def test_share_idle_is_exact_and_keeps_what_has_nobody() -> None:
    """c1: pods x (1) and y (2) and 10 idle -> x 3, y 7 (largest remainder: 3.33, 6.67);
    c2: 5 idle and nobody -> stays __idle__."""
    rows = [holder("x", 1), holder("y", 2), idle_line(10, hours=500_000), idle_line(5, "n9", "c2")]
    (shared,) = allocation_sets(rows, ONE_HOUR, Options(POD, True, True), {})
    assert money(shared, "gpuCostIdle") == {
        "x": Decimal("0.000003"),
        "y": Decimal("0.000007"),
        IDLE: Decimal(0),
    }
    assert money(shared, "totalCost") == {
        "x": Decimal("0.000004"),
        "y": Decimal("0.000009"),
        IDLE: Decimal("0.000005"),
    }
    (plain,) = allocation_sets(rows, ONE_HOUR, Options(POD, include_idle=True), {})
    assert money(plain, "totalCost") == {
        "x": Decimal("0.000001"),
        "y": Decimal("0.000002"),
        IDLE: Decimal("0.000015"),
    }
    assert plain[IDLE]["gpuHours"] == Decimal("0.500000")  # idle lines carry GPU-hours
    assert plain[IDLE]["properties"] == {}  # two clusters: none in common
    (without,) = allocation_sets(rows, ONE_HOUR, Options(POD), {})
    assert IDLE not in without


def test_idle_by_node_shares_per_node() -> None:
    """n1: x (1) with 4 idle; n2: y (3) with 8 idle. By cluster: 12 by 1:3 -> 3 and 9;
    by node: x 4, y 8."""
    rows = [holder("x", 1), holder("y", 3, node="n2"), idle_line(4), idle_line(8, "n2")]
    (cluster,) = allocation_sets(rows, ONE_HOUR, Options(POD, True, True), {})
    assert money(cluster, "gpuCostIdle") == {"x": Decimal("0.000003"), "y": Decimal("0.000009")}
    (node,) = allocation_sets(rows, ONE_HOUR, Options(POD, True, True, idle_by_node=True), {})
    assert money(node, "gpuCostIdle") == {"x": Decimal("0.000004"), "y": Decimal("0.000008")}


def test_idle_spread_by_the_cost_model_is_collected_back() -> None:
    """A weighted idle policy put 6 of idle on x's line: /allocation shows it as idle (or
    shares it by its own rule), never as x's allocated cost."""
    rows = [holder("x", 2, idle=6), holder("y", 1)]
    (plain,) = allocation_sets(rows, ONE_HOUR, Options(POD, include_idle=True), {})
    assert money(plain, "gpuCost") == {
        "x": Decimal("0.000002"),
        "y": Decimal("0.000001"),
        IDLE: Decimal("0.000006"),
    }
    (shared,) = allocation_sets(rows, ONE_HOUR, Options(POD, True, True), {})
    assert money(shared, "gpuCostIdle") == {"x": Decimal("0.000004"), "y": Decimal("0.000002")}


def test_names_labels_and_accumulation() -> None:
    two = [
        Window(H, H + timedelta(hours=1)),
        Window(H + timedelta(hours=1), H + timedelta(hours=2)),
    ]
    a = Row(0, {"cluster": "c", "team": "nlp"}, 5, 4, 1, 0, 500_000, H, H)
    b = Row(
        1,
        {"cluster": "c", "team": "nlp"},
        7,
        0,
        0,
        0,
        1_000_000,
        H + timedelta(hours=1),
        H + timedelta(hours=1),
    )
    u = Row(
        1,
        {"cluster": "c", "team": UNALLOCATED},
        3,
        0,
        3,
        0,
        250_000,
        H + timedelta(hours=1),
        H + timedelta(hours=1),
    )
    by_team = [Aggregate("label:team", "team", "team")]
    sets = allocation_sets([a, b, u], two, Options(by_team), {"team": "team"})
    assert [sorted(s) for s in sets] == [["nlp"], ["__unallocated__", "nlp"]]
    assert sets[0]["nlp"]["properties"] == {"cluster": "c", "labels": {"team": "nlp"}}
    assert sets[1][UNALLOCATED]["properties"] == {"cluster": "c"}
    assert sets[1][UNALLOCATED]["gpuEfficiency"] == 0
    assert sets[1]["nlp"]["gpuEfficiency"] is None  # nothing measured: unknown, not 0
    everything = [(Window(H, H + timedelta(hours=2)), (0, 1))]
    (total,) = allocation_sets([a, b, u], two, Options(by_team), {}, None, everything)
    nlp = total["nlp"]
    assert (nlp["gpuCost"], nlp["gpuHours"], nlp["minutes"]) == (
        Decimal("0.000012"),
        Decimal("1.500000"),
        Decimal("120.000000"),
    )
    assert nlp["gpuCount"] == Decimal("0.750000")  # 1.5 GPU-hours over 2 hours
    assert nlp["gpuEfficiency"] == Decimal("0.800000")  # 4 of the 5 measured
    assert nlp["gpuAllocation"] == {
        "gpuRequestAverage": Decimal("0.750000"),
        "gpuUsageAverage": Decimal("0.600000"),
        "isGPUShared": False,
    }
    assert nlp["window"] == {"start": "2026-11-10T05:00:00Z", "end": "2026-11-10T07:00:00Z"}


def test_json_numbers_are_exact_and_strings_safe() -> None:
    text = to_json({'a\n"b': [Decimal("0.000001"), 2, None, True, "=1+1"]})
    assert text == '{"a\\n\\"b":[0.000001,2,null,true,"=1+1"]}'
    assert json.loads(text) == {'a\n"b': [1e-06, 2, None, True, "=1+1"]}


def test_pod_labels_from_history_latest_in_the_set_else_the_namespace() -> None:
    """p: app=a until 05:30, then app=b; q: no app, its namespace app=ns; r: app=old closed at
    04:00 (not in force in the sets); keys compare sanitised."""
    h4, h5, h6 = t("2026-11-10 04:00"), t("2026-11-10 05:00"), t("2026-11-10 06:00")
    history = [
        Labelled("c", "ns", "p", {"app": "a"}, h4, h5 + timedelta(minutes=30)),
        Labelled("c", "ns", "p", {"app": "b"}, h5 + timedelta(minutes=30), None),
        Labelled("c", "ns", "q", {"x": "y"}, h4, None),
        Labelled("c", "ns", "r", {"app": "old", "app.kubernetes.io/name": "n"}, h4 - DAY_, h4),
        Labelled("c", "ns", None, {"app": "ns"}, h4, None),
        Labelled("c", "other", "p", {"app": "elsewhere"}, h4, None),
    ]
    sets = [Window(h4, h5), Window(h5, h6)]

    def r(pod: str, i: int) -> Row:
        return Row(i, {"cluster": "c", "namespace": "ns", "pod": pod}, 0, 0, 0, 0, 0, h4, h4)

    rows = [r("p", 0), r("p", 1), r("q", 1), r("r", 1)]
    key = label_column("app").removeprefix(LABEL_PREFIX)
    out = with_labels(rows, sets, [key], history)
    assert [x.values[label_column("app")] for x in out] == ["a", "b", "ns", "ns"]
    name = label_column("app_kubernetes_io_name")
    assert name == label_column("app.kubernetes.io/name")
    out = with_labels(
        [r("r", 0)], [Window(h4 - DAY_, h4)], [name.removeprefix(LABEL_PREFIX)], history
    )
    assert out[0].values[name] == "n"


WINDOWISH = st.one_of(
    st.text(max_size=60),
    st.from_regex(r"\A\d{1,30}[mhdw]( offset \d{1,30}[mhdw])?\Z"),
    st.from_regex(r"\A\d{1,20}[,|-]\d{1,20}\Z"),
    st.from_regex(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ,\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\Z"),
)


@settings(max_examples=300, deadline=None, database=None)
@given(window=WINDOWISH, step=st.one_of(st.none(), st.text(max_size=20), WINDOWISH))
def test_any_window_and_step_is_an_answer_or_a_400(window: str, step: str | None) -> None:
    try:
        span = parse_window(window, NOW)
        assert span.start <= span.end
        assert plan(span, parse_step(step, span)).sets is not None
    except BadParameter:
        pass
