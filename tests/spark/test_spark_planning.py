"""Planning arithmetic against cases worked out by hand from the JVM connector's rules.

Each expected value below was computed on paper from the rules in the reference
(spark-kafka-connector.md §4.3 and §4.4), not by running the code under test: the comments
show the arithmetic. The real-Spark tests then check that whole queries plan the same batches
as the JVM connector.
"""

from __future__ import annotations

import pytest

from kafka_ds.client.fetcher import OffsetRange
from kafka_ds.protocol.types import TopicPartition
from kafka_ds.spark.planning import (
    byte_limit,
    group_ranges,
    rate_limit,
    should_delay,
    split_ranges,
)

A0, A1, A2, B0 = (TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("a", 2),
                  TopicPartition("b", 0))


def _no_new(partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    raise AssertionError(f"no new partition expected, asked for {partitions}")


# --- maxOffsetsPerTrigger --------------------------------------------------------------------

def test_rate_limit_shares_in_proportion_and_rounds_down() -> None:
    # backlog a=30, b=10, total 40, limit 10: a 10*30/40 = 7.5 -> 7; b 10*10/40 = 2.5 -> 2
    end = rate_limit(10, {A0: 0, B0: 0}, {A0: 30, B0: 10}, _no_new)
    assert end == {A0: 7, B0: 2}


def test_rate_limit_rounds_a_share_below_one_up() -> None:
    # backlog a=1000, b=1, c=0 (excluded); total 1001; limit 10:
    # a 10*1000/1001 = 9.99 -> 9; b 10*1/1001 = 0.00999 -> ceil -> 1; c stays at latest
    end = rate_limit(10, {A0: 0, A1: 0, A2: 7}, {A0: 1000, A1: 1, A2: 7}, _no_new)
    assert end == {A0: 9, A1: 1, A2: 7}


def test_rate_limit_starts_new_partitions_at_their_earliest_offset() -> None:
    asked: list[list[TopicPartition]] = []

    def earliest(partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        asked.append(partitions)
        return {B0: 10}

    # a: 0 -> 100 (100); b new, earliest 10 -> 50 (40); total 140; limit 14:
    # a 14*100/140 = 10 -> 0+10; b 14*40/140 = 4 -> 10+4
    end = rate_limit(14, {A0: 0}, {A0: 100, B0: 50}, earliest)
    assert end == {A0: 10, B0: 14}
    assert asked == [[B0]]


def test_rate_limit_without_backlog_returns_latest() -> None:
    # every backlog <= 0 (b went back: 50 -> 40) -> total < 1 -> latest as it is
    assert rate_limit(5, {A0: 5, B0: 50}, {A0: 5, B0: 40}, _no_new) == {A0: 5, B0: 40}


def test_rate_limit_never_passes_latest_or_overflows() -> None:
    big = 2**63 - 10
    # one partition: share = limit = 100, begin + 100 would pass 2**63 - 1 -> capped, then
    # min(latest, cap) = latest
    assert rate_limit(100, {A0: big}, {A0: big + 5}, _no_new) == {A0: big + 5}
    # share 50 of a 20-offset backlog: min(latest, begin + 50) = latest
    assert rate_limit(50, {A0: 0}, {A0: 20}, _no_new) == {A0: 20}


# --- minOffsetsPerTrigger / maxTriggerDelay --------------------------------------------------

def test_first_trigger_always_runs() -> None:
    # last trigger 0: now - 0 >= delay -> run, remember now
    assert should_delay(1000, {A0: 0}, {A0: 1}, 10_000_000, 0, 900_000) == (False, 10_000_000)


def test_delay_while_below_minimum_and_before_the_deadline() -> None:
    now, last = 2_000_000, 1_999_000  # 1 s since the last batch, delay 15 min
    # available: (a 105 - 100) + (b 3 - 0) = 8 < 10 -> skip, keep the last time
    assert should_delay(10, {A0: 100, B0: 0}, {A0: 105, B0: 3}, now, last, 900_000) == (
        True, last)
    # available 10 >= 10 -> run
    assert should_delay(10, {A0: 100, B0: 0}, {A0: 107, B0: 3}, now, last, 900_000) == (
        False, now)


def test_partition_missing_from_start_counts_its_whole_latest_offset() -> None:
    # b is not in start: counts 0 -> 6, so 2 + 6 = 8 >= 8 -> run
    assert should_delay(8, {A0: 10}, {A0: 12, B0: 6}, 5_000, 4_000, 60_000) == (False, 5_000)


def test_max_trigger_delay_forces_a_batch() -> None:
    # 60 s passed with delay 60 s -> run although nothing is available
    assert should_delay(1000, {A0: 5}, {A0: 5}, 70_000, 10_000, 60_000) == (False, 70_000)


# --- maxBytesPerTrigger (ours) -----------------------------------------------------------------

def test_byte_limit_shares_bytes_then_converts_to_offsets() -> None:
    # a: 100 offsets * 10 B = 1000 B; b: 100 offsets * 30 B = 3000 B; total 4000 > 1000
    # a gets 1000 * 1000/4000 = 250 B -> 25 offsets; b 750 B -> 25 offsets
    end = byte_limit(1000, {A0: 0, B0: 0}, {A0: 100, B0: 100}, {A0: 10.0, B0: 30.0})
    assert end == {A0: 25, B0: 25}


def test_byte_limit_admits_everything_below_the_cap_and_one_offset_at_least() -> None:
    assert byte_limit(10_000, {A0: 0}, {A0: 100}, {A0: 10.0}) == {A0: 100}
    # a single 5000-byte record under a 1000-byte cap: still one offset, so the query moves
    assert byte_limit(1000, {A0: 7}, {A0: 9}, {A0: 5000.0}) == {A0: 8}


# --- minPartitions / maxRecordsPerPartition ----------------------------------------------------

def _r(tp: TopicPartition, start: int, end: int) -> OffsetRange:
    return OffsetRange(tp.topic, tp.partition, start, end)


def test_no_split_when_enough_ranges_and_empty_ranges_dropped() -> None:
    ranges = [_r(A0, 0, 10), _r(A1, 5, 5), _r(A2, 9, 3)]
    assert split_ranges(ranges, min_partitions=1) == [_r(A0, 0, 10)]
    assert split_ranges(ranges) == [_r(A0, 0, 10)]


def test_min_partitions_splits_large_ranges_in_proportion() -> None:
    # a 100, b 10, total 110, minPartitions 4: a round(100/110*4 = 3.64) = 4 parts,
    # b round(0.36) = 0 -> 1: unsplit. Split target max(4 - 1, 1) = 3 over a's own 100:
    # a round(100/100*3) = 3 parts: 100//3 = 33, 67//2 = 33, 34
    got = split_ranges([_r(A0, 0, 100), _r(B0, 0, 10)], min_partitions=4)
    assert got == [_r(A0, 0, 33), _r(A0, 33, 66), _r(A0, 66, 100), _r(B0, 0, 10)]


def test_min_partitions_rounds_half_up_like_java() -> None:
    # a 50, b 50, minPartitions 5: 50/100*5 = 2.5 -> Java's round gives 3 (half to even: 2)
    got = split_ranges([_r(A0, 0, 50), _r(B0, 100, 150)], min_partitions=5)
    assert got == [_r(A0, 0, 16), _r(A0, 16, 33), _r(A0, 33, 50),
                   _r(B0, 100, 116), _r(B0, 116, 133), _r(B0, 133, 150)]


def test_max_records_per_partition_cuts_into_ceil_parts() -> None:
    # 100 offsets, cap 30: ceil(100/30) = 4 parts of 100//4 = 25
    got = split_ranges([_r(A0, 0, 100), _r(B0, 0, 30)], max_records_per_partition=30)
    assert got == [_r(A0, 0, 25), _r(A0, 25, 50), _r(A0, 50, 75), _r(A0, 75, 100),
                   _r(B0, 0, 30)]


def test_max_records_then_min_partitions() -> None:
    # a 100 with cap 60 -> ceil(100/60) = 2 pieces of 50; b 5. 3 ranges < minPartitions 5:
    # total 105: a pieces round(50/105*5 = 2.38) = 2; b round(0.24) -> 1, unsplit.
    # target max(5 - 1, 1) = 4 over 100: each a piece round(50/100*4) = 2 parts of 25
    got = split_ranges([_r(A0, 0, 100), _r(B0, 0, 5)], min_partitions=5,
                       max_records_per_partition=60)
    assert got == [_r(A0, 0, 25), _r(A0, 25, 50), _r(A0, 50, 75), _r(A0, 75, 100),
                   _r(B0, 0, 5)]


# --- grouping small ranges (ours) --------------------------------------------------------------

def test_small_ranges_on_one_leader_share_a_task() -> None:
    leaders = {A0: 1, A1: 1, A2: 2, B0: 1}
    ranges = [_r(A0, 0, 10), _r(A1, 0, 20), _r(A2, 0, 30), _r(B0, 0, 500)]
    tasks = group_ranges(ranges, leaders, merge_below=100)
    assert sorted(tasks) == sorted([(_r(A0, 0, 10), _r(A1, 0, 20)), (_r(A2, 0, 30),),
                                    (_r(B0, 0, 500),)])


def test_grouping_caps_a_task_and_keeps_pieces_of_a_partition_apart() -> None:
    leaders = {A0: 1, A1: 1}
    # 60 + 60 > 100: two tasks; two pieces of a-0 never in one task
    assert len(group_ranges([_r(A0, 0, 60), _r(A1, 0, 60)], leaders, 100)) == 2
    assert len(group_ranges([_r(A0, 0, 10), _r(A0, 10, 20)], leaders, 100)) == 2
    assert len(group_ranges([_r(A0, 0, 10), _r(A1, 0, 10)], leaders, 0)) == 2


@pytest.mark.parametrize("limit", [1, 7, 100, 999])
def test_rate_limit_batch_is_close_to_the_limit(limit: int) -> None:
    # many partitions of uneven backlog: the admitted total stays within one offset per
    # partition of the limit (floor below, ceil of tiny shares above)
    start = {TopicPartition("t", p): 0 for p in range(10)}
    latest = {TopicPartition("t", p): (p + 1) * 37 for p in range(10)}
    end = rate_limit(limit, start, latest, _no_new)
    admitted = sum(end[tp] - start[tp] for tp in start)
    assert limit - len(start) <= admitted <= limit + len(start)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)
