"""Times as the cost service reads and writes them (costsvc/kit/times.py): ISO text read as UTC
whatever the machine's zone, billing months and quarters across a year's end, a month refused
quoting at most 64 characters of what was given."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from costsvc.kit.times import months_after, parse_month, parse_utc, quarter_floor


@pytest.fixture
def far_from_utc() -> Iterator[None]:
    """The process's local zone at UTC+9, as on a machine in Tokyo."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


@pytest.mark.usefixtures("far_from_utc")
@pytest.mark.parametrize(
    ("text", "hour"),
    [
        ("2026-11-10T05:00:00Z", 5),
        ("2026-11-10T05:00:00", 5),  # no zone: UTC, never the machine's local time
        ("2026-11-10T07:00:00+02:00", 5),
        ("2026-11-10T05:00:00.000+00:00", 5),
    ],
)
def test_iso_text_is_read_as_utc_whatever_the_local_zone(text: str, hour: int) -> None:
    assert datetime.now().astimezone().utcoffset() == timedelta(hours=9)  # the zone took
    got = parse_utc(text)
    assert got == datetime(2026, 11, 10, hour, tzinfo=UTC)
    assert got.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("t", "months", "first"),
    [
        (datetime(2026, 11, 20, 7, tzinfo=UTC), 1, datetime(2026, 12, 1, tzinfo=UTC)),
        (datetime(2026, 12, 31, 23, tzinfo=UTC), 1, datetime(2027, 1, 1, tzinfo=UTC)),
        (datetime(2026, 10, 1, tzinfo=UTC), 3, datetime(2027, 1, 1, tzinfo=UTC)),
        (datetime(2026, 11, 5, tzinfo=UTC), 14, datetime(2028, 1, 1, tzinfo=UTC)),
    ],
)
def test_months_after_cross_a_year_end(t: datetime, months: int, first: datetime) -> None:
    assert months_after(t, months) == first


def test_quarters_start_in_january_april_july_and_october() -> None:
    starts = {quarter_floor(datetime(2026, m, 15, tzinfo=UTC)).month for m in range(1, 13)}
    assert starts == {1, 4, 7, 10}
    assert quarter_floor(datetime(2026, 12, 31, 23, tzinfo=UTC)) == datetime(
        2026, 10, 1, tzinfo=UTC
    )


def test_a_month_is_refused_quoting_at_most_64_characters() -> None:
    assert parse_month("2026-12") == (
        datetime(2026, 12, 1, tzinfo=UTC),
        datetime(2027, 1, 1, tzinfo=UTC),
    )
    with pytest.raises(ValueError) as refused:
        parse_month("9" * 5000)
    assert f"'{'9' * 64}'…" in str(refused.value) and len(str(refused.value)) < 200
