"""numpy arrays to Arrow arrays and back through their buffers, so that pandas stays unloaded.

Layer: protocol (sans-IO). Imports numpy and pyarrow. Used by the decoder (``record_arrow``,
``record_columns_rows``, ``record_columns_types``), the columnar encoder (``record_encoder``,
``arrow_batches``) and the Spark sink's column preparation (``spark.sink_rows``).

pyarrow imports pandas, when it is installed, the first time any of many conversions runs:
``pa.array`` (of a list or of a numpy array), ``pa.scalar`` of a Python value,
``Array.to_numpy``, ``take`` given a numpy index, a compute function given a Python scalar
(``fill_null(0)``, ``pc.equal(array, "name")``, a join's ``b""`` separator). pyspark's sql
extra installs pandas, so every Spark Python worker process that read through us (Spark runs
up to one per executor core) paid for importing it on its first read: 0.41 s of CPU and 39 MB
of resident memory (pandas 3.1, measured 2026-11-28), for a library kafka_ds never uses.
(A worker that writes loads it all the same, in pyspark 4.3's own code: the task's commit
message goes back through ``pa.array`` in ``write_into_data_source``; the encoder keeps clear
of it for the client's users and for a pyspark that stops.) Arrays made from their buffers
(``pa.Array.from_buffers``, ``np.frombuffer``) and scalars taken from such arrays ask pyarrow
nothing about pandas. The read and write paths convert through this module only;
``tests/protocol/test_arrow_numpy.py`` runs them in a fresh interpreter and fails if pandas
was imported. Left as they were: the legacy decoder (message formats v0/v1, those
of Kafka before 0.11) and Python sequences given to the client's columnar API, which
``pa.array`` converts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

BoolArray = npt.NDArray[np.bool_]


def from_numpy(values: npt.ArrayLike, arrow_type: pa.DataType,
               valid: BoolArray | None = None) -> pa.Array:
    """A fixed-width Arrow array holding ``values`` (numbers, booleans, or timestamps as their
    int64 count), null where ``valid`` is False: no copy of the values when they already are
    a contiguous array of the type's numpy dtype."""
    if arrow_type == pa.bool_():
        data = np.packbits(np.asarray(values, dtype=bool), bitorder="little")
        length = len(values)  # type: ignore[arg-type]
    else:
        data = np.ascontiguousarray(values, dtype=_numpy_dtype(arrow_type))
        if data.ndim != 1:
            raise ValueError(f"one-dimensional values needed, got shape {data.shape}")
        length = len(data)
    if valid is None or valid.all():
        return pa.Array.from_buffers(arrow_type, length, [None, pa.py_buffer(data)])
    return pa.Array.from_buffers(
        arrow_type, length,
        [pa.py_buffer(np.packbits(valid, bitorder="little")), pa.py_buffer(data)],
        null_count=length - int(np.count_nonzero(valid)))


def from_mask(mask: BoolArray) -> pa.BooleanArray:
    """A boolean Arrow array (no nulls) of ``mask``."""
    return from_numpy(mask, pa.bool_())


def to_numpy(array: pa.Array) -> npt.NDArray[Any]:
    """The values of a fixed-width array (integers, timestamps as int64, booleans) as numpy,
    without copying integers. A null slot holds whatever its buffer holds: callers mask them
    (``is_valid``)."""
    length, offset = len(array), array.offset
    values = array.buffers()[1]
    if array.type == pa.bool_():
        if values is None:
            return np.zeros(length, dtype=bool)
        bits = np.unpackbits(np.frombuffer(values, dtype=np.uint8), bitorder="little",
                             count=offset + length)
        return bits[offset:].view(bool)
    dtype = _numpy_dtype(array.type)
    if values is None:  # an array of nulls only
        return np.zeros(length, dtype=dtype)
    return np.frombuffer(values, dtype=dtype)[offset:offset + length]


def is_valid(array: pa.Array) -> BoolArray:
    """True where ``array``'s element is not null."""
    if not array.null_count:
        return np.ones(len(array), dtype=bool)
    if array.type == pa.null():
        return np.zeros(len(array), dtype=bool)
    return to_numpy(array.is_valid())


def list_offsets(array: pa.ListArray) -> npt.NDArray[np.int64]:
    """The ``len(array) + 1`` offsets of a list array (its slice), widened to int64."""
    raw = np.frombuffer(array.buffers()[1], dtype=np.int32)
    return raw[array.offset:array.offset + len(array) + 1].astype(np.int64)


def binary_from_list(items: Sequence[bytes | None]) -> pa.BinaryArray:
    """A binary array of ``items`` (None makes a null)."""
    present = [item if item is not None else b"" for item in items]
    lengths = np.fromiter(map(len, present), dtype=np.int64, count=len(present))
    offsets = np.zeros(len(present) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise ValueError(f"{offsets[-1]} bytes do not fit one binary array (2 GiB)")
    valid = np.fromiter((item is not None for item in items), dtype=bool, count=len(present))
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(), len(present),
        [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(present))],
        null_count=len(present) - int(np.count_nonzero(valid)))


def binary_scalar(value: bytes) -> pa.Scalar:
    """``value`` as an Arrow binary scalar (for compute functions' scalar arguments)."""
    return binary_from_list([value])[0]


def repeat_string(text: str, rows: int) -> pa.StringArray:
    """A string array holding ``text`` in each of ``rows`` rows."""
    encoded = text.encode()
    one = pa.Array.from_buffers(pa.string(), 1, [
        None, pa.py_buffer(np.array([0, len(encoded)], dtype=np.int32)), pa.py_buffer(encoded)])
    return pa.repeat(one[0], rows)


def _numpy_dtype(arrow_type: pa.DataType) -> np.dtype[np.generic]:
    width = arrow_type.bit_width
    if pa.types.is_unsigned_integer(arrow_type):
        return np.dtype(f"uint{width}")
    if pa.types.is_integer(arrow_type) or pa.types.is_temporal(arrow_type):
        return np.dtype(f"int{width}")
    if pa.types.is_floating(arrow_type):
        return np.dtype(f"float{width}")
    raise TypeError(f"no numpy view of Arrow type {arrow_type}")
