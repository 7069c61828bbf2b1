"""The network client's decisions, without a broker: bootstrap parsing and rotation, and the
reconnect backoff that keeps a dead broker from being hammered."""

from __future__ import annotations

import threading
import time

import pytest

from kafka_ds.net.pool import NetworkClient, _Backoff, parse_bootstrap
from kafka_ds.net.security import ConnectionConfig
from kafka_ds.protocol.errors import ConfigError, NetworkError


def test_bootstrap_lists_parse_hosts_ports_and_ipv6() -> None:
    assert parse_bootstrap(" a:9092, [::1]:9093 ,,b.example:1") == [
        ("a", 9092), ("::1", 9093), ("b.example", 1)]
    assert parse_bootstrap(["a:1", "b:2"]) == [("a", 1), ("b", 2)]


@pytest.mark.parametrize("servers", ["", " , ", "a", "a:", ":9092", "a:port"])
def test_bad_bootstrap_lists_name_the_option(servers: str) -> None:
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        parse_bootstrap(servers)


def test_backoff_doubles_to_its_cap_and_resets_on_success() -> None:
    backoff = _Backoff(base_ms=50, max_ms=1_000)
    delays = []
    for _ in range(7):
        backoff.failed(3, now_ms=10_000)
        delays.append(backoff.retry_at_ms(3) - 10_000)
    assert delays == [50, 100, 200, 400, 800, 1_000, 1_000]
    assert backoff.retry_at_ms(4) == 0  # per node
    backoff.succeeded(3)
    assert backoff.retry_at_ms(3) == 0
    backoff.failed(3, now_ms=20_000)
    assert backoff.retry_at_ms(3) == 20_050


def test_bootstrap_addresses_are_tried_in_rotation() -> None:
    client = NetworkClient("a:1,b:2,c:3", ConnectionConfig())
    try:
        orders = [client._rotated_bootstrap_ids() for _ in range(4)]
    finally:
        client.close()
    assert orders == [[-1, -2, -3], [-2, -3, -1], [-3, -1, -2], [-1, -2, -3]]


def test_an_unknown_node_asks_for_a_metadata_refresh() -> None:
    client = NetworkClient("a:1", ConnectionConfig())
    try:
        with pytest.raises(NetworkError, match="refresh metadata"):
            client.connection(42)
    finally:
        client.close()


def test_wakeups_while_one_is_pending_write_one_byte() -> None:
    # A bulk send wakes the sender once per batch it queues; until a poll reads the first
    # wakeup, the others have nothing to add.
    client = NetworkClient("a:1", ConnectionConfig())
    try:
        for _ in range(50):
            client.wakeup()
        assert client._wakeup_read.recv(1024) == b"\0"
    finally:
        client.close()


def test_a_wakeup_after_a_poll_read_the_last_one_interrupts_the_next_poll() -> None:
    client = NetworkClient("a:1", ConnectionConfig())
    try:
        for _ in range(3):
            client.wakeup()
            client.wakeup()
            started = time.monotonic()
            client.poll(60_000)  # returns at once: the wakeup is pending
            assert time.monotonic() - started < 30
        waker = threading.Timer(0.2, client.wakeup)
        waker.start()
        started = time.monotonic()
        client.poll(60_000)  # blocked until the timer's wakeup, a poll after the last read
        assert time.monotonic() - started < 30
        waker.join()
    finally:
        client.close()
