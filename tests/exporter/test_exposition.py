"""The renderer is the format contract: check it with prometheus_client's own parsers."""

from __future__ import annotations

import gzip

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.render.exposition import (
    Exposition,
    Family,
    escape_label_value,
    format_value,
    label_pairs,
)

HOSTILE = [
    'quote " in it',
    "back\\slash",
    "new\nline",
    "unicode ✓ Grüße 显卡",
    'all "of\\ them\n ✓',
    "trailing backslash \\",
]


def families(value: str) -> list[Family]:
    gauge = Family("demo_gauge", "gauge", "A gauge with a \\ and a\nnewline in its help.")
    gauge.add(label_pairs([("modelName", value), ("gpu", "0")]), 42)
    dcgm_counter = Family("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Energy (in mJ).")
    dcgm_counter.add(label_pairs([("modelName", value)]), 12345678901234)
    ours = Family("gpu_xid_errors_total", "counter", "XIDs.")
    ours.add(label_pairs([("modelName", value), ("xid", "79")]), 2)
    return [gauge, dcgm_counter, ours]


@pytest.mark.parametrize("value", HOSTILE)
def test_text_format_round_trips_hostile_label_values(value: str) -> None:
    text = Exposition(families(value)).body("text").decode()
    parsed = {f.name: f for f in parse_text(text)}
    assert parsed["demo_gauge"].samples[0].labels["modelName"] == value
    assert parsed["demo_gauge"].documentation == "A gauge with a \\ and a\nnewline in its help."
    # the DCGM counter keeps its name (no _total) and its type in the text format
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text
    energy = parsed["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples[0]
    assert energy.value == 12345678901234
    assert energy.labels["modelName"] == value


@pytest.mark.parametrize("value", HOSTILE)
def test_openmetrics_round_trips_and_keeps_dcgm_counter_names(value: str) -> None:
    text = Exposition(families(value), ["openmetrics"]).body("openmetrics").decode()
    assert text.endswith("# EOF\n")
    parsed = {f.name: f for f in parse_om(text)}
    # OpenMetrics requires _total on counter samples: a DCGM counter is typed unknown instead
    # so the series name Prometheus stores is exactly dcgm-exporter's.
    energy = parsed["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert energy.type == "unknown"
    assert energy.samples[0].name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    assert parsed["gpu_xid_errors"].type == "counter"
    assert parsed["gpu_xid_errors"].samples[0].name == "gpu_xid_errors_total"
    assert parsed["demo_gauge"].samples[0].labels["modelName"] == value


def test_gzip_variants_decompress_to_the_plain_ones() -> None:
    expo = Exposition(families("x"), ["text", "openmetrics"])
    assert gzip.decompress(expo.body("text+gzip")) == expo.body("text")
    assert gzip.decompress(expo.body("openmetrics+gzip")) == expo.body("openmetrics")


def test_empty_families_are_not_rendered() -> None:
    empty = Family("nothing_here", "gauge", "No samples.")
    assert b"nothing_here" not in Exposition([empty]).body("text")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (42, "42"),
        (3.5, "3.5"),
        (350.0, "350"),
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
        (float("nan"), "NaN"),
        (1e20, "1e+20"),
    ],
)
def test_format_value(value: float, text: str) -> None:
    assert format_value(value) == text


def test_escape_leaves_plain_values_alone() -> None:
    assert escape_label_value("NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
    assert escape_label_value('a"b') == 'a\\"b'
