"""arrow_numpy: conversions through buffers equal pyarrow's own, and keep pandas unloaded."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kafka_ds.protocol.arrow_numpy import (
    binary_from_list,
    binary_scalar,
    from_mask,
    from_numpy,
    is_valid,
    list_offsets,
    repeat_string,
    to_numpy,
)

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("arrow_type", [pa.int8(), pa.int16(), pa.int32(), pa.int64(),
                                        pa.uint8(), pa.uint32(), pa.float64(),
                                        pa.timestamp("us", tz="UTC")])
def test_from_numpy_equals_pyarrow_conversion(arrow_type: pa.DataType) -> None:
    values = RNG.integers(-100, 100, 257) if not pa.types.is_unsigned_integer(arrow_type) \
        else RNG.integers(0, 200, 257)
    expected = pa.array(values).cast(arrow_type)
    assert from_numpy(values, arrow_type).equals(expected)
    valid = RNG.random(257) < 0.7
    with_nulls = pa.array(values, mask=~valid).cast(arrow_type)
    assert from_numpy(values, arrow_type, valid=valid).equals(with_nulls)


def test_from_numpy_shares_memory_of_contiguous_values() -> None:
    values = np.arange(10, dtype=np.int64)
    array = from_numpy(values, pa.int64())
    assert np.shares_memory(np.frombuffer(array.buffers()[1], dtype=np.int64), values)
    with pytest.raises(ValueError, match="one-dimensional"):
        from_numpy(np.zeros((2, 2)), pa.int64())


@pytest.mark.parametrize("length", [0, 1, 7, 8, 9, 100])
def test_boolean_arrays_round_trip_at_any_length_and_slice(length: int) -> None:
    mask = RNG.random(length) < 0.5
    array = from_mask(mask)
    assert array.equals(pa.array(mask, pa.bool_()))
    for start in range(min(length, 9)):  # slices starting inside a byte of the bitmap
        assert to_numpy(array.slice(start)).tolist() == mask[start:].tolist()


def test_to_numpy_and_is_valid_follow_slices_and_nulls() -> None:
    values = RNG.integers(0, 1000, 50)
    valid = RNG.random(50) < 0.6
    array = pa.array(values, mask=~valid)
    for start, stop in ((0, 50), (3, 41), (9, 10)):
        part = array.slice(start, stop - start)
        assert to_numpy(part)[valid[start:stop]].tolist() == values[start:stop][
            valid[start:stop]].tolist()
        assert is_valid(part).tolist() == valid[start:stop].tolist()
    assert is_valid(pa.array(values)).all()
    assert not is_valid(pa.nulls(4)).any()


def test_list_offsets_equal_pyarrow_offsets_of_a_slice() -> None:
    lists = pa.array([[1], None, [2, 3], [], [4, 5, 6]], pa.list_(pa.int64()))
    for start in range(4):
        part = lists.slice(start)
        assert list_offsets(part).tolist() == part.offsets.to_pylist()


def test_binary_from_list_and_scalars_equal_pyarrow() -> None:
    items = [b"a", None, b"", b"\x00\xff" * 40, None]
    assert binary_from_list(items).equals(pa.array(items, pa.binary()))
    assert binary_from_list([]).equals(pa.array([], pa.binary()))
    assert binary_scalar(b"xy").equals(pa.scalar(b"xy", pa.binary()))
    assert repeat_string("topic-\u00e9", 3).equals(pa.array(["topic-\u00e9"] * 3, pa.string()))
    assert repeat_string("t", 0).equals(pa.array([], pa.string()))


def test_the_read_and_write_paths_leave_pandas_unimported() -> None:
    """In a fresh interpreter (this one imported pandas long ago), as a Spark worker is."""
    # Without pandas installed the script could not tell; pyspark's sql extra installs it.
    assert importlib.util.find_spec("pandas") is not None
    script = Path(__file__).with_name("pandas_free_paths.py")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pandas stayed unimported" in done.stdout
