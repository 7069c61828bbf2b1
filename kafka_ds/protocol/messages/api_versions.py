"""ApiVersions (key 18): which versions of each API a broker accepts, and its features.

Sent first on every connection. Since v3 the response also carries the cluster's finalized
features; ``transaction.version`` there decides between the two transaction protocols
(KIP-890). A broker that does not know our request version answers UNSUPPORTED_VERSION with
its own ``api_keys`` in a v0 body, so that the client can retry with a version it accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import (
    BOOL,
    INT16,
    INT32,
    INT64,
    STRING,
    Array,
    Request,
    Response,
    Struct,
    f,
)


@dataclass(kw_only=True, slots=True)
class ApiVersion(Struct):
    api_key: int = f(INT16)
    min_version: int = f(INT16)
    max_version: int = f(INT16)


@dataclass(kw_only=True, slots=True)
class SupportedFeatureKey(Struct):
    name: str = f(STRING, "3+")
    min_version: int = f(INT16, "3+")
    max_version: int = f(INT16, "3+")


@dataclass(kw_only=True, slots=True)
class FinalizedFeatureKey(Struct):
    name: str = f(STRING, "3+")
    max_version_level: int = f(INT16, "3+")
    min_version_level: int = f(INT16, "3+")


@dataclass(kw_only=True, slots=True)
class ApiVersionsResponse(Response):
    API_KEY = ApiKey.API_VERSIONS
    VALID_VERSIONS = (0, 4)
    FLEXIBLE_VERSIONS = "3+"

    error_code: int = f(INT16)
    api_keys: list[ApiVersion] = f(Array(ApiVersion))
    throttle_time_ms: int = f(INT32, "1+", ignorable=True)
    supported_features: list[SupportedFeatureKey] = f(
        Array(SupportedFeatureKey), "3+", tag=0, ignorable=True)
    # -1 means the broker does not know its finalized features yet.
    finalized_features_epoch: int = f(INT64, "3+", tag=1, default=-1, ignorable=True)
    finalized_features: list[FinalizedFeatureKey] = f(
        Array(FinalizedFeatureKey), "3+", tag=2, ignorable=True)
    zk_migration_ready: bool = f(BOOL, "3+", tag=3, ignorable=True)


@dataclass(kw_only=True, slots=True)
class ApiVersionsRequest(Request):
    API_KEY = ApiKey.API_VERSIONS
    VALID_VERSIONS = (0, 4)
    FLEXIBLE_VERSIONS = "3+"
    RESPONSE = ApiVersionsResponse

    client_software_name: str = f(STRING, "3+", ignorable=True)
    client_software_version: str = f(STRING, "3+", ignorable=True)
