"""The columns a fetch buffer decodes to: ``RecordColumns`` (rows) and ``BatchColumns``.

Layer: protocol (sans-IO). Imports numpy, pyarrow, ``arrow_numpy`` and ``errors``. Built by
``record_columns`` (and ``record_columns_legacy``); read by ``read_committed``,
``record_arrow`` and the client.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from kafka_ds.protocol.arrow_numpy import from_mask
from kafka_ds.protocol.errors import DecodeError

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class BatchColumns:
    """Per-batch metadata of every complete batch in the buffer, in buffer order.

    Includes batches that produced no rows (control batches, batches outside the offset range):
    ``read_committed`` needs every abort marker.
    """

    base_offsets: Int64Array
    last_offsets: Int64Array
    producer_ids: Int64Array
    producer_epochs: npt.NDArray[np.int16]
    is_transactional: BoolArray
    is_control: BoolArray
    control_types: npt.NDArray[np.int16]  # the marker's type (0 ABORT, 1 COMMIT), -1 for data

    def __len__(self) -> int:
        return len(self.base_offsets)


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """The records of one partition's fetch buffer, as columns (one row per data record).

    ``next_offset`` is the offset to fetch next: the last complete batch's last offset + 1 (at
    least ``start_offset`` when one was given), None when no batch was complete.
    ``bytes_consumed`` is where the complete batches end; ``has_partial_batch`` says whether
    bytes after that begin a batch the broker cut short. ``error`` is the malformed batch that
    ended decoding early (``on_corrupt="truncate"`` only): raise it once these rows are used.
    """

    offsets: Int64Array
    timestamps_ms: Int64Array
    timestamp_types: npt.NDArray[np.int32]
    keys: pa.BinaryArray
    values: pa.BinaryArray
    headers: pa.ListArray | None
    batch_index: npt.NDArray[np.int32]  # row -> index into ``batches``
    batches: BatchColumns
    next_offset: int | None
    bytes_consumed: int
    has_partial_batch: bool
    error: DecodeError | None = None  # set only by on_corrupt="truncate"

    def __len__(self) -> int:
        return len(self.offsets)

    def filter(self, keep: BoolArray) -> RecordColumns:
        """The rows where ``keep`` is True (batch metadata and bookkeeping unchanged)."""
        mask = from_mask(keep)
        return replace(
            self, offsets=self.offsets[keep], timestamps_ms=self.timestamps_ms[keep],
            timestamp_types=self.timestamp_types[keep], keys=self.keys.filter(mask),
            values=self.values.filter(mask),
            headers=None if self.headers is None else self.headers.filter(mask),
            batch_index=self.batch_index[keep],
        )

