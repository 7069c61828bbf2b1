"""Runs the read and write paths in this interpreter; exits 1 if pyarrow imported pandas.

Not a test module: ``tests/protocol/test_arrow_numpy.py`` runs it in a fresh interpreter
(``python <this file>``), because the test process has long imported pandas (pyspark's test
utilities, chispa); ``integration/test_pandas_free.py`` runs it with ``BOOTSTRAP TOPIC`` to add
a round trip through a real broker (``Producer.send_arrow``, transactional, then
``Fetcher.read_arrow`` read_committed). Every decode and encode shape below goes through the
code that Spark's Python workers run, so a conversion that makes pyarrow load pandas
(``arrow_numpy``) fails the test and is named: a finder on ``sys.meta_path`` records the stack
of the first attempt to import it.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

_ATTEMPTS: list[list[str]] = []


class _RecordPandasImports:
    """Records who first tried to import pandas; never imports anything itself."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas":
            _ATTEMPTS.append([f"{frame.filename}:{frame.lineno} in {frame.name}"
                              for frame in traceback.extract_stack()[:-1]])


sys.meta_path.insert(0, _RecordPandasImports())
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import crc32c  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from kafka_ds.protocol.arrow_batches import (  # noqa: E402
    arrow_records,
    choose_partitions,
    encode_partitioned,
    record_sizes,
)
from kafka_ds.protocol.compression import Compression  # noqa: E402
from kafka_ds.protocol.partitioner import StickyPartitioner  # noqa: E402
from kafka_ds.protocol.read_committed import filter_committed  # noqa: E402
from kafka_ds.protocol.record_builder import (  # noqa: E402
    NewRecord,
    encode_batch,
    encode_control_batch,
)
from kafka_ds.protocol.record_columns import DecodeArea, decode_columns, to_arrow  # noqa: E402
from kafka_ds.protocol.record_encoder import encode_records_section  # noqa: E402
from kafka_ds.protocol.records import (  # noqa: E402
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    ControlRecordType,
)
from kafka_ds.spark.sink_options import InputColumns  # noqa: E402
from kafka_ds.spark.sink_rows import RowWriter, _partitions, _timestamps_ms  # noqa: E402


def _buffers() -> list[bytes]:
    varied = [NewRecord(None, b"v" * (50 + 37 * i % 150), 1_700_000_000_000 + i)
              for i in range(300)]
    keyed = [NewRecord(b"k%d" % i, None if i % 7 == 0 else b"x" * (i % 40),
                       1_700_000_000_000 + i, [("h", b"1"), ("\u00e9", None)] if i % 3 else [])
             for i in range(300)]
    bad_header_key = [NewRecord(None, b"v", 0, [("ok", b"1")]) for _ in range(60)]
    buffers = [encode_batch(varied), encode_batch(keyed)]
    buffers += [encode_batch(varied, compression=codec)
                for codec in (Compression.LZ4, Compression.ZSTD, Compression.GZIP,
                              Compression.SNAPPY)]
    fixed = [NewRecord(None, b"f" * 100, 5) for _ in range(200)]
    buffers.append(encode_batch(fixed) + encode_batch(fixed, base_offset=200))
    # A header key that is not UTF-8 (decoded with replacement, as Java does).
    raw = bytearray(encode_batch(bad_header_key, compression=Compression.NONE))
    at = raw.index(b"ok")
    raw[at:at + 2] = b"\xff\xfe"
    raw[CRC_OFFSET:CRC_OFFSET + 4] = crc32c.crc32c(raw[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    buffers.append(bytes(raw))
    return buffers


def _read_paths() -> None:
    area = DecodeArea()
    for buf in _buffers():
        for headers in (False, True):
            columns = decode_columns(buf, include_headers=headers, area=area)
            to_arrow(columns, "topic", 3, include_headers=headers)
            part = decode_columns(buf, start_offset=10, end_offset=50, include_headers=headers,
                                  area=area)
            to_arrow(part, "topic", 3, include_headers=headers)
            none = decode_columns(buf, start_offset=10_000, include_headers=headers, area=area)
            to_arrow(none, "topic", 3, include_headers=headers)
    # The last buffer's header keys are not UTF-8: the replacement path ran.
    names = decode_columns(buf, include_headers=True, area=area).headers.flatten().field("key")
    assert "\ufffd\ufffd" in names.to_pylist()[0], names[0]
    # read_committed: an aborted transaction's records dropped (RecordColumns.filter).
    txn = [NewRecord(None, b"t%d" % i, 0) for i in range(50)]
    plain = [NewRecord(None, b"p%d" % i, 0) for i in range(50)]
    buf = (encode_batch(txn, producer_id=7, producer_epoch=0, base_sequence=0,
                        is_transactional=True)
           + encode_control_batch(ControlRecordType.ABORT, producer_id=7, producer_epoch=0,
                                  base_offset=50)
           + encode_batch(plain, base_offset=51))
    kept = filter_committed(decode_columns(buf, area=area), [(7, 0)])
    assert len(kept) == 50, len(kept)
    to_arrow(kept, "topic", 0)


def _write_paths() -> None:
    rows = 400
    lengths = np.arange(rows, dtype=np.int32) % 90 + 10
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = pa.py_buffer(b"d" * int(offsets[-1]))
    values = pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets), data])
    keys = values.cast(pa.string()).slice(0, rows)
    valid = np.arange(rows) % 5 != 0
    stamps = pa.Array.from_buffers(
        pa.int64(), rows, [pa.py_buffer(np.packbits(valid, bitorder="little")),
                           pa.py_buffer(np.arange(rows, dtype=np.int64))],
        null_count=int((~valid).sum()))
    header_structs = pa.StructArray.from_arrays(
        [keys, values], names=["key", "value"])
    header_offsets = pa.Array.from_buffers(pa.int32(), rows + 1, [
        None, pa.py_buffer(np.minimum(np.arange(rows + 1, dtype=np.int32), rows))])
    headers = pa.ListArray.from_arrays(header_offsets, header_structs.slice(0, rows))
    sticky = StickyPartitioner(16384)
    for record_keys, record_headers in ((None, None), (keys, None), (keys, headers),
                                        (None, headers)):
        records = arrow_records(values, record_keys, timestamps_ms=stamps,
                                headers=record_headers, now_ms=1_700_000_000_000)
        sizes = record_sizes(records)
        explicit = np.where(np.arange(rows) % 3 == 0, 1, -1).astype(np.int64)
        chosen = choose_partitions(records, sizes, "t", 4, [0, 1, 2, 3], sticky,
                                   explicit=explicit, limit_bytes=16384)
        assert list(encode_partitioned(records, sizes, chosen, 16384))
        encode_records_section(records.keys if records.keys is not None
                               else pa.nulls(rows, pa.binary()), values,
                               np.zeros(rows, dtype=np.int64), headers=record_headers)
    # The sink's column preparation: timestamps and partitions with nulls, several topics.
    micros = stamps.cast(pa.timestamp("us", tz="UTC"))
    _timestamps_ms(micros, False, 0)
    partitions = pa.Array.from_buffers(pa.int32(), rows, [
        pa.py_buffer(np.packbits(valid, bitorder="little")),
        pa.py_buffer(np.arange(rows, dtype=np.int32) % 4)], null_count=int((~valid).sum()))
    _partitions(partitions)
    topics = keys.slice(0, rows)  # many distinct names
    batch = pa.RecordBatch.from_arrays([values, topics], names=["value", "topic"])
    writer = RowWriter(None, InputColumns(value="value", topic="topic"),  # type: ignore[arg-type]
                       None, 1000)
    assert sum(part.num_rows for _, part in writer._by_topic(batch)) == rows


def _broker_round_trip(bootstrap: str, topic: str) -> None:
    from kafka_ds.client.fetcher import Fetcher
    from kafka_ds.client.producer import Producer

    rows = 5000
    offsets = np.arange(0, 100 * (rows + 1), 100, dtype=np.int32)
    values = pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets),
                                                       pa.py_buffer(b"r" * (100 * rows))])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn",
                         "compression.type": "lz4"})
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_arrow(topic, values, values).result(60)  # keyed: the values
        producer.send(topic, b"one", b"key").result(60)
        producer.commit_transaction()
    finally:
        producer.close()
    read = 0
    with Fetcher.from_properties({"bootstrap.servers": bootstrap,
                                  "isolation.level": "read_committed",
                                  "include.headers": "true"}) as fetcher:
        for batch in fetcher.read_arrow([(topic, 0, 0, rows + 1)]):
            read += batch.num_rows
    assert read == rows + 1, read


def main() -> int:
    _read_paths()
    _write_paths()
    if len(sys.argv) == 3:
        _broker_round_trip(sys.argv[1], sys.argv[2])
    if "pandas" in sys.modules or _ATTEMPTS:
        print("pyarrow imported pandas; first attempt from:", file=sys.stderr)
        print("\n".join(_ATTEMPTS[0] if _ATTEMPTS else ["(unknown)"]), file=sys.stderr)
        return 1
    print("pandas stayed unimported")
    return 0


if __name__ == "__main__":
    sys.exit(main())
