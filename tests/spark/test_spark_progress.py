"""Lag metrics computed from a progress entry, with Spark's definitions (worked by hand)."""

from __future__ import annotations

from kafka_ds.spark.progress import offsets_behind_latest


def test_offsets_behind_latest_from_a_progress_entry() -> None:
    entry = {"endOffset": '{"t": {"0": 10, "1": 20}}',
             "latestOffset": '{"t": {"0": 15, "1": 20, "2": 4}}'}
    # behind: t-0 15-10 = 5; t-1 0; t-2 missing from the end -> 4 - 0 = 4; avg 9/3 = 3.0
    assert offsets_behind_latest(entry) == {"minOffsetsBehindLatest": "0",
                                            "maxOffsetsBehindLatest": "5",
                                            "avgOffsetsBehindLatest": "3.0"}


def test_average_is_rounded_half_up_to_one_decimal_as_the_progress_shows_it() -> None:
    entry = {"endOffset": '{"t": {"0": 0, "1": 0, "2": 0, "3": 0}}',
             "latestOffset": '{"t": {"0": 200, "1": 60, "2": 3, "3": 0}}'}
    # 263 / 4 = 65.75 -> "65.8" (Spark's progress JSON: BigDecimal, scale 1, HALF_UP)
    assert offsets_behind_latest(entry)["avgOffsetsBehindLatest"] == "65.8"


def test_nothing_to_report() -> None:
    assert offsets_behind_latest({"endOffset": None, "latestOffset": '{"t": {"0": 1}}'}) == {}
    assert offsets_behind_latest({"endOffset": '{"t": {"0": 1}}', "latestOffset": None}) == {}
