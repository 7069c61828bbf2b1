# kafka_ds developer commands. README.md documents `make example` and `make test`.
# Everything installs into .venv; Kafka's jars come from Maven Central into ~/.cache/kafka_ds.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv jars test test-long test-fast test-compat example example-tests connect-test bench \
	bench-quick bench-spark-source bench-spark-sink fuzz soak lint clean

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
# The 30 slowest tests are listed at the end, so that a CI log shows where its minutes went.
test: jars
	$(PY) -m pytest -m "not long" --durations=30

# The pipeline fault scenarios that take minutes each (ten driver kills over 200k rows, broker
# and leader kills, the proxy, a broker down past the timeouts): about an hour on 2 cores.
test-long: jars
	$(PY) -m pytest -m long

# Unit tests only (no broker, no Spark).
test-fast: $(STAMP)
	$(PY) -m pytest tests

# The protocol, producer and fetcher suites against the Kafka 3.9 broker (CI runs it too).
test-compat: jars
	KAFKA_VERSION=3.9.2 $(PY) -m pytest integration -m "not cluster and not spark"

# The streaming quick start through spark-submit on a local Kafka fed by a small generator:
# prints four micro-batches, then stops (examples/local_run.py, examples/quickstart.py).
example: jars
	$(PY) examples/local_run.py

# Every example through spark-submit against a real broker, output checked (make example's
# own run is the slow-marked test in there too).
example-tests: jars
	$(PY) -m pytest integration/test_examples.py

# format("pykafka") from a Spark Connect client against pyspark's own Connect server.
connect-test: jars
	$(PY) -m pytest integration/test_spark_connect.py

# Every benchmark in one run, kafka_ds beside the JVM connector, confluent-kafka, kafka-python
# and Kafka's perf tools: bench-results/<date>/report.md with PNG plots (the README's figures).
bench: jars
	$(PY) -m integration.benchmarks.report

# The same cases, small: under 5 minutes on 2 cores (4.5 on the slowest machine here before
# the write case's no-I/O sink added about 10 s and the micro-batch case about 12; 2.5 with
# both on the fastest).
# Written to bench-results/<date>-quick.
bench-quick: jars
	$(PY) -m integration.benchmarks.report --quick

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
	mkdir -p bench-results/soak
	$(PY) -m integration.soak --minutes 30 --interval-s 60 --csv bench-results/soak/soak.csv \
		--plot bench-results/soak/soak.png

# The long fuzz run: a million cases per decoder fuzz test, then Fetch responses mutated in
# flight by the proxy, 500 seeds per mutation class through the client and 20 through Spark.
fuzz: jars
	KAFKA_DS_FUZZ_CASES=1000000 $(PY) -m pytest tests -k fuzz -p no:timeout
	KAFKA_DS_FETCH_FUZZ_SEEDS=500 KAFKA_DS_SPARK_FUZZ_SEEDS=20 $(PY) -m pytest -p no:timeout \
		integration/test_fetcher_fuzz.py integration/test_pipeline_fuzz.py

lint: $(STAMP)
	$(VENV)/bin/ruff check kafka_ds tests integration examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache
