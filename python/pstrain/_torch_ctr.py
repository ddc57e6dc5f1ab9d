"""Criteo and libsvm files as a dataset of the Trainer (pstrain.torch.CtrDataset): the records are
read by the C++ worker's own reader (pstrain._core.CtrReader over data/ctr_source.h), so a
PyTorch worker trains on the same keys, dense features and labels as --model=ctr does.

A job whose data_format is criteo or libsvm hands its records out in file order, so every batch
is a run of consecutive records, read forward in one streaming pass per epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from pstrain import InvalidArgumentError, _core

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["CtrBatch", "CtrDataset"]


class CtrBatch:
    """The features of a batch of CTR records (its labels travel beside it):

    dense     float32 [n, num_dense] (Criteo: 13 log-transformed counts, missing ones 0; libsvm: 0)
    keys      per categorical field, int64 [keys of the field in the batch] (uint64 keys bit for
              bit; they stay on the CPU, where the embedding modules de-duplicate them)
    offsets   per field, int64 [n + 1]: sample i's bag is keys[f][offsets[f][i]:offsets[f][i + 1]]
              (EmbeddingBag(..., include_last_offset=True) takes them as they are)
    weights   per field, float32 per key, or None (every key weighs 1; Criteo)
    """

    def __init__(self, dense: torch.Tensor, keys: list[torch.Tensor], offsets: list[torch.Tensor],
                 weights: list[torch.Tensor | None]) -> None:
        self.dense = dense
        self.keys = keys
        self.offsets = offsets
        self.weights = weights

    def __len__(self) -> int:
        return self.dense.shape[0]

    @property
    def num_fields(self) -> int:
        return len(self.keys)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> CtrBatch:
        """The batch with its dense features, offsets and weights on `device` (keys stay)."""
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=non_blocking)
        return CtrBatch(move(self.dense), self.keys, [move(o) for o in self.offsets],
                        [None if w is None else move(w) for w in self.weights])


class CtrDataset:
    """The records of one CTR file, for pstrain.torch.Trainer: len() is its record count (at most
    `limit` when > 0, as the job's --train_limit / --test_limit cut them), and a batch of
    consecutive records is (CtrBatch, labels float32 [n]).

    path         the file (plain or gzip); pstrain._core.find_ctr_file finds a data folder's
    format       "criteo" or "libsvm" (data/criteo_reader.h, data/libsvm_reader.h)
    bad_records  "fail": a line that does not parse raises DataLossError naming its file and line;
                 "skip": it is skipped, and still counts as a record (so a batch may hold fewer
                 samples than records)
    """

    def __init__(self, path: str, format: str = "criteo", bad_records: str = "fail", limit: int = 0) -> None:
        self.path = path
        self.format = format
        self._reader = _core.CtrReader(path, format, bad_records)
        records = _core.count_records(path)
        self._len = min(records, limit) if limit and limit > 0 else records

    def __len__(self) -> int:
        return self._len

    @property
    def skipped(self) -> int:
        return self._reader.skipped

    def read(self, first: int, count: int) -> tuple[CtrBatch, torch.Tensor]:
        """Records [first, first + count) (clipped to len()) as (CtrBatch, labels)."""
        count = max(0, min(count, self._len - first))
        r = self._reader.read(first, count)
        keys = [torch.from_numpy(k.view(np.int64)) for k in r["keys"]]
        offsets = [torch.from_numpy(o) for o in r["offsets"]]
        weights = [None if w is None else torch.from_numpy(w) for w in r["weights"]]
        return CtrBatch(torch.from_numpy(r["dense"]), keys, offsets, weights), torch.from_numpy(r["labels"])

    def batch(self, indices: Sequence[int] | NDArray[np.int64]) -> tuple[CtrBatch, torch.Tensor]:
        """The Trainer's batch of records `indices`: a run of consecutive ones."""
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size == 0:
            return self.read(0, 0)
        first = int(indices[0])
        if indices.size > 1 and not np.array_equal(indices, np.arange(first, first + indices.size)):
            raise InvalidArgumentError(
                f"{self.path}: records {indices[:4].tolist()}... are not consecutive; a CTR file is read in runs "
                "of records, which the job hands out only when it is started with --data_format=criteo (or "
                "libsvm)")
        return self.read(first, int(indices.size))
