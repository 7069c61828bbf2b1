"""Sans-IO Kafka protocol core: bytes in, values out.

Nothing in this package opens a socket, reads the clock, starts a thread or imports pyspark;
``tests/protocol/test_sans_io.py`` enforces it. State machines take ``now_ms`` as an argument.
"""
