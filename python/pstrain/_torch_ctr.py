"""Criteo and libsvm files as a dataset of the Trainer (pstrain.torch.CtrDataset), and a job's data
stream (pstrain.torch.CtrStream): the records are read by the C++ worker's own readers
(pstrain._core.CtrReader over data/ctr_source.h, pstrain._core.StreamReader over
worker/stream_reader.h), so a PyTorch worker trains on the same keys, dense features and labels as
--model=ctr does.

A job whose data_format is criteo or libsvm hands its records out in file order, so every batch
is a run of consecutive records, read forward in one streaming pass per epoch (a stream: once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

from pstrain import InvalidArgumentError, _core

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["CtrBatch", "CtrDataset", "CtrStream"]


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
        return _batch_of(self._reader.read(first, count))

    def batch(self, indices: Sequence[int] | NDArray[np.int64]) -> tuple[CtrBatch, torch.Tensor]:
        """The Trainer's batch of records `indices`: a run of consecutive ones."""
        first, count = _run(indices, self.path)
        return self.read(first, count)


def _batch_of(r: dict[str, Any]) -> tuple[CtrBatch, torch.Tensor]:
    """A reader's dict of arrays (CtrReader.read, StreamReader.read) as (CtrBatch, labels)."""
    keys = [torch.from_numpy(k.view(np.int64)) for k in r["keys"]]
    offsets = [torch.from_numpy(o) for o in r["offsets"]]
    weights = [None if w is None else torch.from_numpy(w) for w in r["weights"]]
    return CtrBatch(torch.from_numpy(r["dense"]), keys, offsets, weights), torch.from_numpy(r["labels"])


def _run(indices: Sequence[int] | NDArray[np.int64], what: str) -> tuple[int, int]:
    """(first, count) of sample indices that must be a run of consecutive records."""
    indices = np.asarray(indices, dtype=np.int64)
    if indices.size == 0:
        return 0, 0
    first = int(indices[0])
    if indices.size > 1 and not np.array_equal(indices, np.arange(first, first + indices.size)):
        raise InvalidArgumentError(
            f"{what}: records {indices[:4].tolist()}... are not consecutive; CTR records are read in runs, "
            "which the job hands out only when it is started with --data_format=criteo (or libsvm)")
    return first, int(indices.size)


class CtrStream:
    """A job's data stream (--data_stream=DIR, Criteo or libsvm files that keep arriving) as the
    training data of pstrain.torch.Trainer, which declares no sample count for it (the scheduler
    counts the stream's ready records) and lets it read the files its session's view lists. A batch
    is a run of stream positions, possibly across files, as (CtrBatch, labels float32 [n]), read by
    the C++ worker's reader; `last_files` says which files its samples came from, [(file, samples)]
    in order, which the Trainer reports with the predictions given to step(loss, scores=...) for the
    job's progressive validation (AUC and log loss per file, docs/guides/streams.md).

    dir          the stream's folder (the job's data_stream)
    format       "criteo" or "libsvm"
    bad_records  "fail" or "skip", as CtrDataset's
    """

    def __init__(self, dir: str, format: str = "criteo", bad_records: str = "fail") -> None:
        self.dir = dir
        self.format = format
        self._reader = _core.StreamReader(dir, format, bad_records)
        self._session: _core.Session | None = None
        self.last_files: list[tuple[int, int]] = []

    def follow(self, session: _core.Session) -> None:
        """Reads from the files `session`'s view lists (the Trainer calls it once it has joined)."""
        self._session = session

    @property
    def skipped(self) -> int:
        return self._reader.skipped

    def batch(self, indices: Sequence[int] | NDArray[np.int64]) -> tuple[CtrBatch, torch.Tensor]:
        """The Trainer's batch of stream positions `indices`: a run of consecutive ones."""
        if self._session is None:
            raise InvalidArgumentError(f"data stream {self.dir}: read before a Trainer follows it")
        first, count = _run(indices, f"data stream {self.dir}")
        r = self._reader.read(self._session, first, count)
        self.last_files = [(int(f), int(n)) for f, n in r["files"]]
        return _batch_of(r)
