"""BatchResult: a batch's outcome reaches every waiter, whenever it waits.

The result makes its event only when a wait finds the batch unfinished; these tests pin what
must hold whatever the timing: a wait that starts before, during or after the completion
returns True, and a wait on an unfinished batch times out with False.
"""

from __future__ import annotations

import threading
import time

from kafka_ds.client.delivery import BatchResult


def test_wait_times_out_on_an_unfinished_batch() -> None:
    result = BatchResult()
    started = time.monotonic()
    assert result.wait(0.05) is False
    assert time.monotonic() - started >= 0.04
    assert not result.done()


def test_wait_after_completion_returns_at_once() -> None:
    result = BatchResult()
    result.complete(42, -1, None)
    assert result.done()
    assert result.wait(0) is True
    assert result.base_offset == 42


def test_waiters_that_came_first_are_woken() -> None:
    result = BatchResult()
    outcomes: list[bool] = []
    waiting = threading.Barrier(5)

    def waiter() -> None:
        waiting.wait()
        outcomes.append(result.wait(10))

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for thread in threads:
        thread.start()
    waiting.wait()
    time.sleep(0.05)  # the waiters are (most likely) blocked in wait() by now
    started = time.monotonic()
    result.complete(7, -1, None)
    for thread in threads:
        thread.join(10)
    assert outcomes == [True] * 4
    assert time.monotonic() - started < 5  # woken by complete(), not by their timeout


def test_a_wait_racing_the_completion_never_misses_it() -> None:
    # Many rounds with the waiter and the completer released together: a wait that makes its
    # event just as complete() runs must still see the completion.
    for _ in range(300):
        result = BatchResult()
        go = threading.Barrier(2)
        outcome: list[bool] = []

        def waiter(result: BatchResult = result, go: threading.Barrier = go,
                   outcome: list[bool] = outcome) -> None:
            go.wait()
            outcome.append(result.wait(5))

        thread = threading.Thread(target=waiter)
        thread.start()
        go.wait()
        result.complete(0, -1, None)
        thread.join(10)
        assert outcome == [True]


def test_callbacks_run_once_whether_added_before_or_after_completion() -> None:
    result = BatchResult()
    calls: list[str] = []
    result.add_callback(lambda: calls.append("before"))
    result.complete(0, -1, RuntimeError("boom"))
    result.add_callback(lambda: calls.append("after"))
    assert calls == ["before", "after"]
    assert isinstance(result.error, RuntimeError)
    assert result.wait(0)
