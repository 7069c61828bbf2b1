"""Real-broker test harness for kafka_ds: Kafka jars, TLS material, KRaft clusters, Spark."""
