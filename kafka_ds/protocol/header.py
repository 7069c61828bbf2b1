"""Request and response headers (request v1/v2, response v0/v1).

Layer: protocol (stdlib + ``primitives``).

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id as a
*classic* nullable string. v2 adds a tagged-field section and is used for flexible request
versions; the client_id keeps its int16 length prefix even then (the header predates flexible
encoding). v0 (no client_id) was removed in Kafka 4.0 and is never sent.

Response header v0: correlation_id. v1 adds tagged fields and goes with flexible responses,
except that ApiVersions responses always use v0: a client that does not yet know which
versions the broker speaks must still be able to parse the answer that tells it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from kafka_ds.protocol import primitives as p
from kafka_ds.protocol.api_keys import ApiKey


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def write_request_header(out: bytearray, header: RequestHeader, flexible: bool) -> None:
    p.write_int16(out, header.api_key)
    p.write_int16(out, header.api_version)
    p.write_int32(out, header.correlation_id)
    p.write_string(out, header.client_id)
    if flexible:
        out.append(0)  # no tagged fields


def read_request_header(buf: p.Buffer, pos: int,
                        flexible_for: Callable[[int, int], bool]) -> tuple[RequestHeader, int]:
    """Read a request header (the fake broker's direction). ``flexible_for(key, version)``."""
    api_key, pos = p.read_int16(buf, pos)
    api_version, pos = p.read_int16(buf, pos)
    correlation_id, pos = p.read_int32(buf, pos)
    client_id, pos = p.read_string(buf, pos)
    if flexible_for(api_key, api_version):
        _, pos = p.read_tagged_fields(buf, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def response_header_is_flexible(api_key: int, response_flexible: bool) -> bool:
    """Response header v1 (with tags) for flexible responses, except ApiVersions: always v0."""
    return response_flexible and api_key != ApiKey.API_VERSIONS


def read_response_header(buf: p.Buffer, pos: int, flexible: bool) -> tuple[int, int]:
    """Read a response header; returns (correlation_id, position after the header)."""
    correlation_id, pos = p.read_int32(buf, pos)
    if flexible:
        _, pos = p.read_tagged_fields(buf, pos)
    return correlation_id, pos


def write_response_header(out: bytearray, correlation_id: int, flexible: bool) -> None:
    p.write_int32(out, correlation_id)
    if flexible:
        out.append(0)
