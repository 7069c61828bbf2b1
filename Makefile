# kafka_ds developer commands. README.md documents `make example` and `make test`.
# Everything installs into .venv; Kafka's jars come from Maven Central into ~/.cache/kafka_ds.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv jars test test-fast test-compat example bench bench-spark-source bench-spark-sink fuzz \
	lint clean soak

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,dev,jks]"
	@# gssapi (the kerberos extra) compiles against MIT Kerberos: without its headers the
	@# GSSAPI tests skip, saying so (.ci/run installs them, and CI insists they run).
	@if command -v krb5-config >/dev/null; then $(PY) -m pip install --quiet -e ".[kerberos]"; \
	else echo "krb5-config not found (apt-get install libkrb5-dev): GSSAPI tests will skip"; fi
	touch $(STAMP)

venv: $(STAMP)

# Kafka 4.x (default) and 3.9 jars, and Spark's JVM Kafka connector for the installed pyspark.
jars: $(STAMP)
	$(PY) -m integration.harness fetch-jars

# The whole suite: unit tests, then real-broker tests (single broker and a 3-broker cluster).
test: jars
	$(PY) -m pytest

# Unit tests only (no broker, no Spark).
test-fast: $(STAMP)
	$(PY) -m pytest tests

# The protocol, producer and fetcher suites against the Kafka 3.9 broker (CI runs it too).
test-compat: jars
	KAFKA_VERSION=3.9.2 $(PY) -m pytest integration -m "not cluster and not spark"

# Starts a local Kafka, writes sample data and reads it back (see examples/quickstart.py).
example: jars
	$(PY) examples/quickstart.py

bench: jars
	$(PY) integration/benchmarks/run_all.py

# format("pykafka") beside Spark's JVM connector: batch and streaming throughput, per-batch overhead.
bench-spark-source: jars
	$(PY) integration/benchmarks/bench_spark_source.py

# The pykafka sink beside Spark's JVM sink, same session and broker (medians, ratios, the
# driver's commit time per micro-batch); see integration/benchmarks/bench_spark_sink.py.
bench-spark-sink: jars
	$(PY) -m integration.benchmarks.bench_spark_sink

# The whole pipeline (pykafka -> transform -> exactly-once pykafka) at a steady rate for 30
# minutes: memory, lag and sockets every minute, then every row counted once (integration/soak.py).
soak: jars
	$(PY) -m integration.soak --minutes 30 --interval-s 60 --csv soak.csv

# The long fuzz run (a million cases per fuzz test).
fuzz: $(STAMP)
	KAFKA_DS_FUZZ_CASES=1000000 $(PY) -m pytest tests -k fuzz -p no:timeout

lint: $(STAMP)
	$(VENV)/bin/ruff check kafka_ds tests integration examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache
