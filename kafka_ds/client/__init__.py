"""Kafka client: cluster metadata, admin, offset lookups, the fetcher and the producer. Never imports pyspark."""
