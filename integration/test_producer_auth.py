"""The producer's background paths treat a refused authentication as final (issue 13, extra):
a connection the sender opens on its own (a produce to a broker it had to reconnect to) that
the broker refuses fails the records at once with ``AuthenticationError``, instead of retrying
them until ``delivery.timeout.ms``.

The refusal is real: OAUTHBEARER against the broker's unsecured validator with a token from a
provider function that starts handing out expired tokens, as a broken token agent would.
"""

from __future__ import annotations

import time

import pytest

from integration.harness.cluster import KafkaCluster
from integration.harness.listeners import unsecured_jwt
from kafka_ds.client.producer import Producer
from kafka_ds.protocol.errors import AuthenticationError

_expired = False


def token() -> str:
    """``sasl.oauthbearer.token.provider``: valid until the test says otherwise."""
    return unsecured_jwt("producer", lifetime_s=-60 if _expired else 3600)


def test_a_refused_reconnection_fails_the_records_at_once(kafka: KafkaCluster,
                                                          topic: str) -> None:
    global _expired
    delivery_timeout_ms = 120_000
    producer = Producer({
        "bootstrap.servers": kafka.bootstrap("SASL_OAUTH"), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.provider": f"{__name__}:token", "linger.ms": "0",
        "delivery.timeout.ms": str(delivery_timeout_ms), "retry.backoff.ms": "100"})
    try:
        assert producer.send_many(topic, [b"a", b"b"], partition=0).result(60) == 2
        _expired = True
        sender = producer._sender
        leader = sender.leader_of(topic, 0)
        attempts = sender.client.metrics.connection_attempts
        # Drop the connection on the sender's thread: the next produce must reconnect, and the
        # broker refuses the expired token.
        sender.submit(lambda s: s.client.disconnect(leader)).result(10)
        started = time.monotonic()
        with pytest.raises(AuthenticationError, match="OAUTHBEARER") as refused:
            producer.send_many(topic, [b"c"], partition=0).result(delivery_timeout_ms / 1000)
        elapsed_s = time.monotonic() - started
        assert sender.client.metrics.connection_attempts > attempts  # the refusal happened
        # At once: well within the delivery timeout it used to wait out (a quarter of it is
        # slack for a loaded machine, and far from the 120 s of the old behaviour).
        assert elapsed_s < delivery_timeout_ms / 1000 / 4, elapsed_s
        # And final: a later send fails at once too, with the same error.
        with pytest.raises(AuthenticationError):
            producer.send_many(topic, [b"d"], partition=0).result(10)
        assert "eyJ" not in str(refused.value)  # no token in the message
    finally:
        _expired = False
        producer.close(5_000)
