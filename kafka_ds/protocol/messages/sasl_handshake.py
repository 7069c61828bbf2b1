"""SaslHandshake (key 17): choose a SASL mechanism before authenticating.

Never flexible, so its request header is always v1. With v0 the SASL tokens that follow
travel as raw length-prefixed frames; with v1 each token goes in a SaslAuthenticate request,
which is what this library sends. On UNSUPPORTED_SASL_MECHANISM the response lists the
mechanisms the broker has enabled.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import INT16, STRING, Array, Request, Response, f


@dataclass(kw_only=True, slots=True)
class SaslHandshakeResponse(Response):
    API_KEY = ApiKey.SASL_HANDSHAKE
    VALID_VERSIONS = (0, 1)
    FLEXIBLE_VERSIONS = "none"

    error_code: int = f(INT16)
    mechanisms: list[str] = f(Array(STRING))


@dataclass(kw_only=True, slots=True)
class SaslHandshakeRequest(Request):
    API_KEY = ApiKey.SASL_HANDSHAKE
    VALID_VERSIONS = (0, 1)
    FLEXIBLE_VERSIONS = "none"
    RESPONSE = SaslHandshakeResponse

    # "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", ...
    mechanism: str = f(STRING)
