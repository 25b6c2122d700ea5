"""OpenCost's filter language on /allocation (costsvc/opencost/filters.py): what its parser
accepts and refuses (opencost/opencost ``core/pkg/filter/ast/{lexer,parser}.go`` and
``parser_test.go``'s cases), how a filter keeps a chargeback row, the fields the chargeback does
not keep, and any text is a filter tree or a 400."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costsvc.opencost.filters import Everything, FilterError, parse
from costsvc.opencost.shape import Row, check_filter, keep_row

H05 = datetime(2026, 11, 10, 5, tzinfo=UTC)


# OpenCost's parser_test.go: inputs that parse, and inputs that must not
@pytest.mark.parametrize(
    "text",
    [
        'namespace: "kubecost"',
        '(namespace: "kubecost")',
        '((namespace: "kubecost"))',
        '(namespace: "kubecost" + services~:"foo")',
        'namespace: "kubecost" + services~:"foo" + (cluster:"cluster-one" | controllerKind:"d")',
        'namespace: "kubecost" | services~:"foo" | (cluster:"c" + controllerKind:"d")',
        'node:"node a b c" , "node 12 3"\n+\n\rnamespace : "kubecost"',
        '(namespace:"kubecost" | cluster<~:"cluster-") + services~:"foo"',
        '(label~:"foo" + label[foo]:"bar") | (label!~:"foo" + annotation[foo]:"bar")',
    ],
)
def test_filters_opencost_parses(text: str) -> None:
    parse(text)


@pytest.mark.parametrize(
    "text",
    [
        "()",
        'namespace.:"kubecost"',
        '(namespace:"kubecost"))',
        '((namespace:"kubecost")',
        'namespace:"kubecost" | services~:"foo" + cluster:"bar"',
        'namespace:"kubecost" + services~:"foo" | cluster:"bar"',
        '(namespace:"kubecost" + (services~:"foo" | cluster:"bar") | controllerKind<~:"dep"))',
        'namespace:"ns" pod:"p"',
        "namespace:ns",
        "namespace:",
        'colour:"red"',
        'namespace!"x"',
        'namespace:"é"' + "é",
    ],
)
def test_filters_opencost_refuses(text: str) -> None:
    with pytest.raises(FilterError):
        parse(text)


ROW = {"cluster": "c1", "node": "n1", "namespace": "ml-train", "pod": "p-7", "team": "nlp"}


def row(**values: str) -> Row:
    return Row(0, {**ROW, **values}, 0, 0, 0, 0, 0, H05, H05)


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ('namespace:"ml-train"', True),
        ('namespace:"ml"', False),
        ('namespace~:"train"', True),
        ('namespace<~:"ml-"', True),
        ('namespace~>:"-train"', True),
        ('namespace!~>:"-train"', False),
        ('namespace!:"a","b"', True),  # none of
        ('namespace!:"a","ml-train"', False),
        ('pod:"x","p-7"', True),  # any of
        ('label[team]:"nlp"', True),
        ('team:"nlp" + node:"n1"', True),
        ('team:"nlp" + node:"n2"', False),
        ('(team:"x" | cluster:"c1") + pod!<~:"q"', True),
        ("", True),
    ],
)
def test_filter_evaluation(text: str, matches: bool) -> None:
    labels = {"team": "team"}
    node = parse(text)
    assert check_filter(node, labels) <= {*ROW}
    assert keep_row(row(), node, labels) is matches


# OpenCost rewrites "__unallocated__" to "" in every :, ~:, <~:, ~>: before matching
# (core/pkg/filter/transform/unallocated.go); a list field (services) has no element to match
# a prefix or suffix (core/pkg/filter/matcher/stringslicematcher.go)
NO_CONTROLLER = {"controller": "", "controller_kind": ""}
JOB = {"controller": "nightly", "controller_kind": "CronJob"}


@pytest.mark.parametrize(
    ("text", "values", "matches"),
    [
        ('controllerKind:"__unallocated__"', NO_CONTROLLER, True),
        ('controllerKind:"__unallocated__"', JOB, False),
        ('controllerKind!:"__unallocated__"', NO_CONTROLLER, False),
        ('controllerKind!:"__unallocated__"', JOB, True),
        ('controllerName:"__unallocated__"', NO_CONTROLLER, True),
        ('controllerName:"__unallocated__","nightly"', JOB, True),  # any of
        ('controllerName!:"__unallocated__","nightly"', JOB, False),  # none of
        ('container:"__unallocated__"', {}, True),  # no container column: none
        ('container:"__unallocated__"', {"container": "main"}, False),
        ('node!:"__unallocated__"', {}, True),
        ('label[app]:"__unallocated__"', {"label:label_app": ""}, True),
        ('label[app]:"__unallocated__"', {"label:label_app": "gen"}, False),
        ('product:"__unallocated__"', {"label:label_app": ""}, True),  # an alias: no label
        ('team:"__unallocated__"', {"team": "__unallocated__"}, True),
        ('team:"__unallocated__"', {}, False),  # ROW's team is nlp
        ('namespace~:"__unallocated__"', {}, True),  # contains "": every string
        ('namespace<~:"__unallocated__"', {}, True),
        ('namespace!~>:"__unallocated__"', {}, False),
        ('controllerKind:"unallocated"', NO_CONTROLLER, False),  # only the exact word
        ('controllerKind:"__unallocated__x"', NO_CONTROLLER, False),
        ('services:"__unallocated__"', {}, True),  # an empty list contains only ""
        ('services<~:"__unallocated__"', {}, False),  # ... and has no element to start with
        ('services!~>:"__unallocated__"', {}, True),
        ('provider<~:"__unallocated__"', {}, True),  # a string field: "" starts with ""
        ('annotation[a]:"__unallocated__"', {}, True),
    ],
)
def test_unallocated_is_the_empty_value(text: str, values: dict[str, str], matches: bool) -> None:
    labels = {"team": "team"}
    node = parse(text)
    assert keep_row(row(**values), node, labels) is matches


def test_filters_on_what_the_chargeback_does_not_keep_are_refused() -> None:
    labels = {"team": "team", "app_kubernetes_io_team": "team"}
    assert check_filter(parse('label[app_kubernetes_io_team]:"x"'), labels) == {"team"}
    assert check_filter(parse('label[app.kubernetes.io/name]:"x"'), labels) == {
        "label:label_app_kubernetes_io_name"  # from the label history (podlabels.py)
    }
    with pytest.raises(FilterError):
        check_filter(parse('label:"x"'), labels)
    # kept now, or compared with nothing as OpenCost compares an allocation without them
    assert check_filter(parse('container:"c" + controllerKind:"job"'), labels) == {
        "container",
        "controller_kind",
        "controller",
    }
    assert check_filter(parse('annotation[a]:"b" | services:"s"'), labels) == set()
    assert check_filter(parse('product:"x"'), labels) == {"label:label_app"}
    assert isinstance(parse("  "), Everything)


FILTERISH = st.one_of(
    st.text(max_size=80),
    st.lists(
        st.sampled_from(
            [
                *("(", ")", "+", "|", ",", ":", "!:", "~:", "<~:", "~>:", "!~>:", "[", "]"),
                *('"a"', '"é"', "namespace", "label", "label[app]", "pod", "team", "node", "x"),
            ]
        ),
        max_size=20,
    ).map(" ".join),
)


@settings(max_examples=300, deadline=None, database=None)
@given(text=FILTERISH)
def test_any_filter_is_a_tree_or_a_400(text: str) -> None:
    try:
        node = parse(text)
        check_filter(node, {"team": "team"})
        keep_row(row(), node, {"team": "team"})
    except FilterError:
        pass
