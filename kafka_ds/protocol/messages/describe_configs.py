"""DescribeConfigs (key 32): read the configuration of topics, brokers and other resources.

``resource_type`` 2 is a topic and 4 a broker (an empty name asks for the cluster-wide
default; a broker id as name asks that broker, and the request must go to it). Null
``configuration_keys`` asks for every key. Sensitive values (passwords) come back null.
``config_source`` says where a value came from (1 topic override, 4 static broker file, 5
Kafka's default, ...); it replaced v0's ``IsDefault`` flag, which is not declared here.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.schema import (
    BOOL,
    INT8,
    INT16,
    INT32,
    STRING,
    Array,
    Request,
    Response,
    Struct,
    f,
)


@dataclass(kw_only=True, slots=True)
class DescribeConfigsSynonym(Struct):
    name: str = f(STRING, "1+")
    value: str | None = f(STRING, "1+", nullable="0+")
    source: int = f(INT8, "1+")


@dataclass(kw_only=True, slots=True)
class DescribeConfigsResourceResult(Struct):
    name: str = f(STRING)
    value: str | None = f(STRING, nullable="0+")
    read_only: bool = f(BOOL)
    config_source: int = f(INT8, "1+", default=-1, ignorable=True)
    is_sensitive: bool = f(BOOL)
    synonyms: list[DescribeConfigsSynonym] = f(Array(DescribeConfigsSynonym), "1+", ignorable=True)
    config_type: int = f(INT8, "3+", ignorable=True)
    documentation: str | None = f(STRING, "3+", nullable="0+", ignorable=True)


@dataclass(kw_only=True, slots=True)
class DescribeConfigsResult(Struct):
    error_code: int = f(INT16)
    error_message: str | None = f(STRING, nullable="0+")
    resource_type: int = f(INT8)
    resource_name: str = f(STRING)
    configs: list[DescribeConfigsResourceResult] = f(Array(DescribeConfigsResourceResult))


@dataclass(kw_only=True, slots=True)
class DescribeConfigsResponse(Response):
    API_KEY = ApiKey.DESCRIBE_CONFIGS
    VALID_VERSIONS = (1, 4)
    FLEXIBLE_VERSIONS = "4+"

    throttle_time_ms: int = f(INT32)
    results: list[DescribeConfigsResult] = f(Array(DescribeConfigsResult))


@dataclass(kw_only=True, slots=True)
class DescribeConfigsResource(Struct):
    resource_type: int = f(INT8)
    resource_name: str = f(STRING)
    # None asks for every configuration key of the resource.
    configuration_keys: list[str] | None = f(Array(STRING), nullable="0+")


@dataclass(kw_only=True, slots=True)
class DescribeConfigsRequest(Request):
    API_KEY = ApiKey.DESCRIBE_CONFIGS
    VALID_VERSIONS = (1, 4)
    FLEXIBLE_VERSIONS = "4+"
    RESPONSE = DescribeConfigsResponse

    resources: list[DescribeConfigsResource] = f(Array(DescribeConfigsResource))
    include_synonyms: bool = f(BOOL, "1+")
    include_documentation: bool = f(BOOL, "3+")
