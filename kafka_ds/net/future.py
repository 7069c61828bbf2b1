"""A small single-assignment future for requests in flight.

Layer: net. Lighter than ``concurrent.futures.Future`` (no lock, no condition variable):
request futures are completed and read on the thread that drives the ``NetworkClient``.
Callbacks run on that thread, in the order they were added, when the future completes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_PENDING, _SUCCEEDED, _FAILED = 0, 1, 2


class RequestFuture(Generic[T]):
    __slots__ = ("_callbacks", "_error", "_state", "_value")

    def __init__(self) -> None:
        self._state = _PENDING
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[RequestFuture[T]], None]] = []

    def done(self) -> bool:
        return self._state != _PENDING

    def succeeded(self) -> bool:
        return self._state == _SUCCEEDED

    def failed(self) -> bool:
        return self._state == _FAILED

    @property
    def error(self) -> BaseException | None:
        return self._error

    def result(self) -> T:
        """The value; raises the error for a failed future and RuntimeError for a pending one."""
        if self._state == _SUCCEEDED:
            return self._value
        if self._state == _FAILED:
            assert self._error is not None
            raise self._error
        raise RuntimeError("result() of a request that has not completed")

    def succeed(self, value: T) -> None:
        if self._state != _PENDING:
            raise RuntimeError("future completed twice")
        self._state, self._value = _SUCCEEDED, value
        self._run_callbacks()

    def fail(self, error: BaseException) -> None:
        if self._state != _PENDING:
            raise RuntimeError("future completed twice")
        self._state, self._error = _FAILED, error
        self._run_callbacks()

    def add_callback(self, callback: Callable[[RequestFuture[T]], None]) -> None:
        """Call ``callback(self)`` on completion (at once if already complete)."""
        if self._state == _PENDING:
            self._callbacks.append(callback)
        else:
            callback(self)

    def _run_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)
