"""Kafka client: metadata, admin, offset lookups, the fetcher and the producer. No pyspark."""
