"""SaslAuthenticate (key 36): carry one SASL token each way (after SaslHandshake v1).

The bytes are the mechanism's own messages (for SCRAM, client-first / server-first / ...);
a failure comes back as SASL_AUTHENTICATION_FAILED with the broker's reason in
``error_message``. A non-zero ``session_lifetime_ms`` (v1+, KIP-368) means the broker will
close the connection after that long unless the client authenticates again.

The request's bytes hold a PLAIN password or a bearer token, so its ``repr`` shows only their
length: a debug log or a traceback that prints locals must not leak them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.primitives import Buffer
from kafka_ds.protocol.schema import BYTES, INT16, INT64, STRING, Request, Response, f


@dataclass(kw_only=True, slots=True)
class SaslAuthenticateResponse(Response):
    API_KEY = ApiKey.SASL_AUTHENTICATE
    VALID_VERSIONS = (0, 2)
    FLEXIBLE_VERSIONS = "2+"

    error_code: int = f(INT16)
    error_message: str | None = f(STRING, nullable="0+")
    auth_bytes: Buffer = f(BYTES)
    session_lifetime_ms: int = f(INT64, "1+", ignorable=True)


@dataclass(kw_only=True, slots=True)
class SaslAuthenticateRequest(Request):
    API_KEY = ApiKey.SASL_AUTHENTICATE
    VALID_VERSIONS = (0, 2)
    FLEXIBLE_VERSIONS = "2+"
    RESPONSE = SaslAuthenticateResponse

    auth_bytes: Buffer = f(BYTES)

    def __repr__(self) -> str:
        return f"SaslAuthenticateRequest(auth_bytes=<{len(self.auth_bytes)} bytes, redacted>)"
