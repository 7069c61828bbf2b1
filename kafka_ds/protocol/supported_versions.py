"""The version range this library speaks for each API, as a plain table.

Layer: protocol. Every connection negotiates ApiVersions against this table, so it is read on
the path that starts a streaming query. Deriving it from the message classes
(``kafka_ds.protocol.supported``) would import all 25 message modules, about 35 ms of CPU in
every Python process Spark starts to plan a query, most of them for APIs that process never
sends. ``tests/protocol/test_supported_versions.py`` fails when a message class's
``VALID_VERSIONS`` and this table disagree, so the table cannot drift from the schemas.
"""

from __future__ import annotations

from kafka_ds.protocol.api_keys import ApiKey

SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 13),
    ApiKey.FETCH: (4, 18),
    ApiKey.LIST_OFFSETS: (1, 11),
    ApiKey.METADATA: (0, 13),
    ApiKey.OFFSET_COMMIT: (2, 10),
    ApiKey.OFFSET_FETCH: (1, 10),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
}
