"""Request and response schemas, one module per Kafka API, declared by hand as data."""
