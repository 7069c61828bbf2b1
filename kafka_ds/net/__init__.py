"""Thin blocking I/O: transports, one broker connection, the connection pool, the clock."""
