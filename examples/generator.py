"""A small generator of JSON click events, written to Kafka with kafka_ds's own producer.

Each event is ``{"user": "u7", "page": "/cart", "event_time": "<ISO 8601, UTC>"}``, keyed by
user. ``make example`` runs it in a thread beside the quick start; on its own::

    python examples/generator.py --bootstrap localhost:9092 --topic clicks --seconds 30

It creates the topic (``--partitions``, 3 by default) if the cluster does not have it yet,
writes ``--rate`` events a second until ``--seconds`` have passed (or ``--events`` were
written), then stops by itself.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from datetime import UTC, datetime

from kafka_ds.client.admin import Admin
from kafka_ds.client.producer import Producer

PAGES = ("/home", "/search", "/product", "/cart", "/checkout")


def click_event(rng: random.Random, event_time_ms: int) -> tuple[bytes, bytes]:
    """One (key, value) pair: the user as key, the event as JSON."""
    user = f"u{rng.randrange(20)}"
    stamp = datetime.fromtimestamp(event_time_ms / 1000, UTC).isoformat(timespec="milliseconds")
    value = {"user": user, "page": rng.choice(PAGES), "event_time": stamp.replace("+00:00", "Z")}
    return user.encode(), json.dumps(value).encode()


def generate(bootstrap: str, topic: str, *, rate_per_s: float = 20.0, seconds: float = 30.0,
             events: int | None = None, stop: threading.Event | None = None,
             seed: int = 7) -> int:
    """Write events until ``seconds`` pass, ``events`` are written or ``stop`` is set."""
    rng = random.Random(seed)
    written = 0
    deadline = time.monotonic() + seconds
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": "20"}) as producer:
        while time.monotonic() < deadline and (events is None or written < events):
            if stop is not None and stop.is_set():
                break
            key, value = click_event(rng, int(time.time() * 1000))
            producer.send(topic, value, key=key)
            written += 1
            time.sleep(1.0 / rate_per_s)
        producer.flush()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description="Write JSON click events to a Kafka topic.")
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--rate", type=float, default=20.0, help="events per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--partitions", type=int, default=3,
                        help="partitions of the topic, if it has to be created")
    args = parser.parse_args()
    # Brokers often refuse to create topics on first use (auto.create.topics.enable=false).
    with Admin.from_properties({"bootstrap.servers": args.bootstrap}) as admin:
        admin.create_topic(args.topic, partitions=args.partitions, exist_ok=True)
    written = generate(args.bootstrap, args.topic, rate_per_s=args.rate, seconds=args.seconds,
                       events=args.events)
    print(f"generator: wrote {written} events to {args.topic}")


if __name__ == "__main__":
    main()
