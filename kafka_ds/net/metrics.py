"""Counters of a ``NetworkClient``'s connections, shared by all of them.

Layer: net. Cumulative for the life of the client (connections come and go, the counts stay);
a test or a monitor snapshots them with ``snapshot()`` and compares.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class ConnectionMetrics:
    connection_attempts: int = 0  # connect() calls, successful or not
    connections_opened: int = 0  # connects that completed ApiVersions (and SASL)
    authentications: int = 0  # SASL authentications on connect
    reauthentications: int = 0  # KIP-368 re-authentications on an open connection
    reauthentication_failures: int = 0
    # Requests whose responses were still due when a re-authentication began (they complete
    # first), and requests sent during one (held back until it ended).
    requests_in_flight_at_reauthentication: int = 0
    requests_held_for_reauthentication: int = 0
    # Connections dropped because their SASL session had expired before anything re-authenticated
    # them (an idle connection nobody polled); the next request reconnects.
    expired_sessions_closed: int = 0

    def snapshot(self) -> ConnectionMetrics:
        return dataclasses.replace(self)
