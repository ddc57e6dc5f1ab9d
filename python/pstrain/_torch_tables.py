"""Embedding tables held by the parameter servers, as PyTorch modules (pstrain.torch.Embedding and
pstrain.torch.EmbeddingBag).

A table has no vocabulary and no weight tensor in the worker: its rows live on the servers, keyed
by any 64-bit key, and a step moves only the rows its batch touches:

    forward(keys)     the distinct keys of the batch (uint64 order) -> the session pulls exactly
                      those rows (one round trip to the servers per table)
                      -> torch.embedding / embedding_bag over the pulled rows
    backward          the gradient of each distinct key's row (a key used several times in the
                      batch gets the sum) -> the session's row gradient, pushed with the dense
                      gradient by trainer.step(loss)

The Trainer declares the modules' tables with the model (name, dim, and optionally init_bound,
optimizer, admit and evict), binds each module to its table of the job, and tells the modules when a training
step or an evaluation is under way. Each table is looked up at most once per training step (a
second lookup would replace the first one's rows under autograd's feet), by one module.

A model with many tables (one per field of a CTR record) pays one round trip per module;
embedding_bags() looks up the bags of several EmbeddingBag modules in a single one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence, Union, cast

import numpy as np
import torch
import torch.nn.functional as F

from pstrain import FailedPreconditionError, InvalidArgumentError, _core

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

    # A batch's keys: a torch.int64 tensor, or a NumPy uint64 or int64 array.
    Keys = Union[torch.Tensor, NDArray[np.uint64], NDArray[np.int64]]
    # Keys on their way to the servers: a NumPy uint64 or int64 array (int64 taken bit for bit).
    KeyArray = Union[NDArray[np.uint64], NDArray[np.int64]]

__all__ = ["Embedding", "EmbeddingBag", "embedding_bags"]


class _TableModule(torch.nn.Module):
    """What Embedding and EmbeddingBag share: the table's declaration and the lookup of a batch's
    rows through the Trainer's session."""

    def __init__(self, table: str, dim: int, init_bound: float | None = None,
                 optimizer: str | dict[str, Any] | None = None, admit: str | None = None,
                 evict: dict[str, Any] | None = None, row_dtype: str | None = None) -> None:
        super().__init__()
        kind = type(self).__name__
        if not isinstance(table, str) or not table:
            raise InvalidArgumentError(f"{kind}: table name {table!r}, expected a non-empty str")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise InvalidArgumentError(f"{kind} '{table}': dim {dim!r}, expected an int >= 1")
        if init_bound is not None and (isinstance(init_bound, bool) or not isinstance(init_bound, (int, float))):
            raise InvalidArgumentError(f"{kind} '{table}': init_bound {init_bound!r}, expected a number or None")
        if optimizer is not None and not isinstance(optimizer, (str, dict)):
            raise InvalidArgumentError(
                f"{kind} '{table}': optimizer {optimizer!r}, expected None (the job's), a type name such as "
                "'sgd', or a dict such as {'type': 'adagrad', 'lr': 0.05}")
        if admit is not None and not isinstance(admit, str):
            raise InvalidArgumentError(
                f"{kind} '{table}': admit {admit!r}, expected None (the job's, --table_admission), 'always', "
                "'count:N' or 'probability:P'")
        if evict is not None and not isinstance(evict, dict):
            raise InvalidArgumentError(
                f"{kind} '{table}': evict {evict!r}, expected None (the job's) or a dict such as "
                "{'ttl_updates': 1000, 'max_rows': 100000, 'order': 'lru'}")
        if row_dtype is not None and row_dtype not in ("fp32", "fp16", "bf16"):
            raise InvalidArgumentError(
                f"{kind} '{table}': row_dtype {row_dtype!r}, expected None (the job's, --table_row_dtype), "
                "'fp32', 'fp16' or 'bf16'")
        self.table = table
        self.dim = dim
        self.init_bound = init_bound
        self.optimizer = optimizer
        self.admit = admit
        self.evict = evict
        self.row_dtype = row_dtype
        # Set by the Trainer (_TableBinding), or by load_export / serve_tables (_RowsBinding).
        self._binding: _TableBinding | _RowsBinding | None = None
        self._table_id = -1

    def table_spec(self) -> dict[str, Any]:
        """The table's declaration, as the Trainer sends it with the model."""
        return {"name": self.table, "dim": self.dim, "init_bound": self.init_bound, "optimizer": self.optimizer,
                "admit": self.admit, "evict": self.evict, "row_dtype": self.row_dtype}

    def extra_repr(self) -> str:
        return f"table='{self.table}', dim={self.dim}"

    def _what(self) -> str:
        return f"{type(self).__name__} '{self.table}'"

    def _keys(self, keys: Keys) -> KeyArray:
        """The keys as a C-contiguous int64/uint64 NumPy array on the CPU (int64 taken bit for bit)."""
        if isinstance(keys, torch.Tensor):  # torch.is_tensor, which mypy does not narrow by
            if keys.dtype != torch.int64:
                raise InvalidArgumentError(
                    f"{self._what()}: keys are {keys.dtype}, expected torch.int64 (or a NumPy uint64 or int64 array)")
            return np.ascontiguousarray(keys.detach().cpu().numpy())
        if isinstance(keys, np.ndarray):
            if keys.dtype not in (np.uint64, np.int64):
                raise InvalidArgumentError(
                    f"{self._what()}: keys are a NumPy {keys.dtype} array, expected uint64 or int64")
            # Of the same dtype (numpy's stub would widen a uint64-or-int64 array to any 64-bit integers).
            return cast("KeyArray", np.ascontiguousarray(keys))
        raise InvalidArgumentError(
            f"{self._what()}: keys are a {type(keys).__name__}, expected a torch.int64 tensor or a NumPy uint64 or "
            "int64 array")


def _lookup(modules: Sequence[_TableModule], keys: Sequence[KeyArray]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """[(rows, index)] per module: the distinct rows of its keys (a NumPy array) as a (distinct
    keys x dim) tensor on the model's device, and for every key its row, shaped like the keys; all
    the modules' tables pulled in one round trip."""
    for m in modules:
        if m._binding is None:
            raise FailedPreconditionError(
                f"{m._what()} is not bound to a job: create the pstrain.torch.Trainer of its model first "
                "(its rows live on the job's servers)")
    binding = modules[0]._binding
    assert binding is not None  # every module's was checked above
    unique = [_core.unique_keys(k) for k in keys]
    rows = binding.pull(modules, [distinct for distinct, _ in unique])
    return [(r, torch.from_numpy(index).to(binding.device)) for r, (_, index) in zip(rows, unique)]


class Embedding(_TableModule):
    """A lookup table like torch.nn.Embedding, whose rows the servers hold.

    table        the table's name in the job, [A-Za-z0-9_.-]+
    dim          floats per row
    init_bound   rows start uniform in [-init_bound, init_bound); None: the job's (1/sqrt(dim))
    optimizer    how the servers update the rows: None (the job's, --table_optimizer), a type name
                 ("adagrad", "sgd", "lazy_adam", "ftrl") or a dict of proto/job.proto
                 SparseOptimizerSpec fields ({"type": "sgd", "lr": 0.1})
    admit        which keys become rows: None (the job's, --table_admission), "always", "count:N" (at
                 a key's N-th update) or "probability:P" (each update of a key without a row admits
                 it with probability P); updates of keys not (yet) admitted are dropped, and such
                 keys read as their initial value. Every worker must declare the same.
    evict        which rows leave: None (the job's) or a dict of proto/job.proto EvictionSpec fields:
                 ttl_updates (not updated in that many of the server's updates), ttl_seconds
                 (async/ssp jobs: not updated in that many seconds of the scheduler's clock), max_rows (per
                 server; "order": "lru" or "lfu" decides which go), min_l2_norm, keep_rows,
                 every_updates. An evicted key that comes back starts from its initial value.
    row_dtype    how the servers store the rows' values: None (the job's, --table_row_dtype),
                 "fp32", or "fp16" / "bf16" at half the bytes, rounded after every update (the
                 optimizer's state stays fp32)

    forward(keys): keys of any shape (torch.int64, or a NumPy uint64/int64 array; any 64-bit value
    is a key) -> the rows, shaped keys.shape + (dim,).
    """

    def forward(self, keys: Keys) -> torch.Tensor:
        rows, index = _lookup([self], [self._keys(keys)])[0]
        return F.embedding(index, rows)


class EmbeddingBag(_TableModule):
    """Sums, means or maxima of bags of rows, like torch.nn.EmbeddingBag, whose rows the servers hold.

    table, dim, init_bound, optimizer, admit, evict, row_dtype: as Embedding.
    mode                 "sum", "mean" (torch's default) or "max"
    include_last_offset  offsets has one more entry, the end of the last bag (CSR style, as
                         pstrain.torch.CtrDataset gives them)

    forward(keys, offsets=None, per_sample_weights=None), as torch.nn.EmbeddingBag: 2-D keys
    (bags x keys per bag) without offsets, or 1-D keys with 1-D int64 offsets (bag i starts at
    offsets[i]); per_sample_weights (mode "sum" only): floats shaped like keys. -> (bags, dim).
    """

    def __init__(self, table: str, dim: int, mode: str = "mean", init_bound: float | None = None,
                 optimizer: str | dict[str, Any] | None = None, include_last_offset: bool = False,
                 admit: str | None = None, evict: dict[str, Any] | None = None,
                 row_dtype: str | None = None) -> None:
        super().__init__(table, dim, init_bound, optimizer, admit, evict, row_dtype)
        if mode not in ("sum", "mean", "max"):
            raise InvalidArgumentError(f"EmbeddingBag '{table}': mode {mode!r}, expected 'sum', 'mean' or 'max'")
        self.mode = mode
        self.include_last_offset = bool(include_last_offset)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, mode='{self.mode}'"

    def forward(self, keys: Keys, offsets: torch.Tensor | ArrayLike | None = None,
                per_sample_weights: torch.Tensor | ArrayLike | None = None) -> torch.Tensor:
        keys, offsets, per_sample_weights = self._inputs(keys, offsets, per_sample_weights)
        rows, index = _lookup([self], [keys])[0]
        return self._pool(rows, index, keys.shape, offsets, per_sample_weights)

    def _inputs(self, keys: Keys, offsets: torch.Tensor | ArrayLike | None,
                per_sample_weights: torch.Tensor | ArrayLike | None
                ) -> tuple[KeyArray, torch.Tensor | None, torch.Tensor | None]:
        """The forward's inputs checked: keys as NumPy, offsets and weights as tensors (or None)."""
        what = self._what()
        keys = self._keys(keys)
        key_dims = keys.ndim
        if offsets is None:
            if key_dims != 2:
                raise InvalidArgumentError(f"{what}: {key_dims}-D keys without offsets, expected 2-D (bags x keys)")
        else:
            if key_dims != 1:
                raise InvalidArgumentError(f"{what}: {key_dims}-D keys with offsets, expected 1-D")
            if not isinstance(offsets, torch.Tensor):
                offsets = torch.as_tensor(offsets)
            if offsets.dtype not in (torch.int64, torch.int32) or offsets.ndim != 1:
                raise InvalidArgumentError(
                    f"{what}: offsets are {offsets.ndim}-D {offsets.dtype}, expected 1-D torch.int64")
        if per_sample_weights is not None:
            if self.mode != "sum":
                raise InvalidArgumentError(f"{what}: per_sample_weights need mode 'sum', this bag's is '{self.mode}'")
            if not isinstance(per_sample_weights, torch.Tensor):
                per_sample_weights = torch.as_tensor(per_sample_weights)
            if not per_sample_weights.is_floating_point() or tuple(per_sample_weights.shape) != tuple(keys.shape):
                raise InvalidArgumentError(
                    f"{what}: per_sample_weights are {per_sample_weights.dtype} {list(per_sample_weights.shape)}, "
                    f"expected floats shaped like the keys {list(keys.shape)}")
        return keys, offsets, per_sample_weights

    def _pool(self, rows: torch.Tensor, index: torch.Tensor, shape: tuple[int, ...], offsets: torch.Tensor | None,
              per_sample_weights: torch.Tensor | None) -> torch.Tensor:
        device = rows.device
        if offsets is not None:
            offsets = offsets.to(device=device, dtype=torch.int64)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.to(device=device, dtype=rows.dtype)
        if rows.shape[0] == 0:
            # No keys at all: every bag is empty (torch cannot index a table of no rows).
            bags = shape[0] if offsets is None else offsets.numel() - (1 if self.include_last_offset else 0)
            return rows.new_zeros((bags, self.dim))
        return F.embedding_bag(index, rows, offsets, mode=self.mode,
                               per_sample_weights=per_sample_weights, include_last_offset=self.include_last_offset)


def embedding_bags(bags: Sequence[EmbeddingBag], keys: Sequence[Keys],
                   offsets: Sequence[torch.Tensor | ArrayLike | None] | None = None,
                   per_sample_weights: Sequence[torch.Tensor | ArrayLike | None] | None = None) -> list[torch.Tensor]:
    """[bags[i](keys[i], offsets[i], per_sample_weights[i])] for EmbeddingBag modules of one model,
    with every table's rows pulled in one round trip to the servers instead of one per module.
    offsets and per_sample_weights: lists like keys, or None for none at all."""
    n = len(bags)
    offsets = [None] * n if offsets is None else list(offsets)
    per_sample_weights = [None] * n if per_sample_weights is None else list(per_sample_weights)
    if not all(isinstance(b, EmbeddingBag) for b in bags):
        raise InvalidArgumentError("embedding_bags: expected pstrain.torch.EmbeddingBag modules")
    if not (len(keys) == len(offsets) == len(per_sample_weights) == n):
        raise InvalidArgumentError(
            f"embedding_bags: {n} bags, {len(keys)} key lists, {len(offsets)} offset lists and "
            f"{len(per_sample_weights)} weight lists, expected one each")
    if n == 0:
        return []
    inputs = [b._inputs(k, o, w) for b, k, o, w in zip(bags, keys, offsets, per_sample_weights)]
    looked_up = _lookup(bags, [k for k, _, _ in inputs])
    return [b._pool(rows, index, k.shape, o, w) for b, (rows, index), (k, o, w) in zip(bags, looked_up, inputs)]


class _TableBinding:
    """The Trainer's side of its model's table modules: which job table each one is, and what the
    trainer is doing (a training step, an evaluation, neither), so that lookups pull through the
    session at the right time and gradients land in the step they belong to."""

    def __init__(self, session: _core.Session, modules: list[tuple[str, _TableModule]], device: torch.device) -> None:
        self.session = session
        self.device = device
        self.modules = modules
        job_tables = session.tables
        ids = {t["name"]: i for i, t in enumerate(job_tables)}
        names = ", ".join(t["name"] for t in job_tables) or "none"
        for name, module in modules:
            where = f"{type(module).__name__} '{name}'" if name else module._what()
            table_id = ids.get(module.table)
            if table_id is None:
                raise InvalidArgumentError(
                    f"{where} looks up table '{module.table}'; the job has no such table (its tables: {names})")
            dim = job_tables[table_id]["dim"]
            if dim != module.dim:
                raise InvalidArgumentError(
                    f"{where} has dim {module.dim}; the job's table '{module.table}' has dim {dim}")
        for _, module in modules:
            module._binding = self
            module._table_id = ids[module.table]
        self.step = 0           # bumped for every training batch handed to the loop
        self.training = False   # a training step is under way (its rows may get gradients)
        self.pulled: set[int] = set()  # tables looked up in this training step

    def begin_step(self) -> None:
        self.step += 1
        self.training = True
        self.pulled = set()

    def end_step(self) -> None:
        self.training = False

    def pull(self, modules: Sequence[_TableModule], distincts: list[KeyArray]) -> list[torch.Tensor]:
        """The rows of each module's `distinct` keys (pulled now, all in one round trip), as
        tensors on the device; with autograd on in a training step, their gradients go to the
        session's row gradients."""
        tables = [m._table_id for m in modules]
        for m in modules:
            if m._binding is not self:
                raise InvalidArgumentError(f"{m._what()} belongs to another Trainer's model")
        grad = self.training and torch.is_grad_enabled()
        seen = set(self.pulled) if self.training else set()
        for m, table in zip(modules, tables):
            if table in seen:
                raise FailedPreconditionError(
                    f"{m._what()} was looked up twice in one {'training step' if self.training else 'call'}: look "
                    "each table up once per batch (a second lookup would replace the rows of the first)")
            seen.add(table)
        if self.training:
            self.pulled = seen
        try:
            self.session.pull_rows(distincts, tables)
        except FailedPreconditionError as e:
            raise FailedPreconditionError(
                f"{modules[0]._what()}: {e} (rows are pulled for a batch of the trainer's iterator, before "
                "trainer.step, or in its evaluation)") from None
        out = []
        for m, table in zip(modules, tables):
            # A copy: the session's buffer is reused by the next pull of the table.
            rows = torch.from_numpy(self.session.rows(table)).to(self.device, copy=True)
            if grad:
                rows.requires_grad_(True)
                step = self.step
                rows.register_hook(lambda g, m=m, table=table, step=step: self._gradient(m, table, step, g))
            out.append(rows)
        return out

    def _gradient(self, module: _TableModule, table: int, step: int, grad: torch.Tensor) -> None:
        if step != self.step or not self.training:
            raise FailedPreconditionError(
                f"{module._what()}: backward ran after its step ended (trainer.step was called before "
                "loss.backward()?)")
        target = torch.from_numpy(self.session.row_gradient(table))
        target.add_(grad.detach().to("cpu", torch.float32))
        return None


class _RowsBinding:
    """Table modules bound to rows outside a job, for serving a trained model in a user's own
    process (pstrain.torch.load_export, serve_tables): lookups read rows, with no gradient, from
    `rows_of(table, distinct_keys)` -> (distinct keys x dim float32). Looked up as often as the
    caller likes."""

    def __init__(self, modules: list[_TableModule], rows_of: Callable[[str, KeyArray], ArrayLike],
                 tables: dict[str, dict[str, Any]], device: torch.device, what: str) -> None:
        for module in modules:
            info = tables.get(module.table)
            if info is None:
                names = ", ".join(sorted(tables)) or "none"
                raise InvalidArgumentError(
                    f"{module._what()} looks up table '{module.table}'; {what} has no such table (its tables: {names})")
            if info["dim"] != module.dim:
                raise InvalidArgumentError(
                    f"{module._what()} has dim {module.dim}; {what}'s table '{module.table}' has dim {info['dim']}")
        self.rows_of = rows_of
        self.device = device
        for module in modules:
            module._binding = self

    def pull(self, modules: Sequence[_TableModule], distincts: list[KeyArray]) -> list[torch.Tensor]:
        return [torch.from_numpy(np.ascontiguousarray(self.rows_of(m.table, keys), dtype=np.float32)).to(self.device)
                for m, keys in zip(modules, distincts)]


def _table_modules(model: torch.nn.Module) -> list[_TableModule]:
    return [m for m in model.modules() if isinstance(m, _TableModule)]


def bind_export_rows(model: torch.nn.Module, export: dict[str, Any], device: torch.device, where: str) -> None:
    """Binds `model`'s table modules to the rows of `export` (pstrain.read_export's dict): a key with
    a row reads it, any other key its initial value, as on the servers."""
    tables = export["tables"]

    def rows_of(table: str, keys: KeyArray) -> NDArray[np.float32]:
        t = tables[table]
        keys = np.ascontiguousarray(keys).view(np.uint64)
        at = np.searchsorted(t["keys"], keys)
        found = at < len(t["keys"])
        found[found] = t["keys"][at[found]] == keys[found]
        out = _core.initial_rows(keys, t["dim"], t["seed"], t["id"], t["init_bound"])
        out[found] = t["values"][at[found]]
        return out

    _RowsBinding(_table_modules(model), rows_of, tables, device, where)


def bind_served_rows(model: torch.nn.Module, client: Any, device: torch.device) -> None:
    """Binds `model`'s table modules to a pstrain.ServeClient: each lookup asks pstrain-serve for
    the rows of its distinct keys (one round trip per module)."""
    info = client.model_info()
    tables = {t["name"]: t for t in info["tables"]}
    _RowsBinding(_table_modules(model), lambda table, keys: client.lookup(table, keys)[1], tables, device,
                 "the served model")
