"""Train a PyTorch model as a worker of a pstrain job.

    import pstrain.torch as pst

    model = Net()
    trainer = pst.Trainer(model, train_set, test_set)   # joins the job (--scheduler / PSTRAIN_SCHEDULER)
    for x, y in trainer:                                # this worker's batches, in the job's order
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        trainer.step(loss)                              # push the gradients, install the new weights

What the Trainer does for the script:

- Parameters live on the servers. The first worker's initial values become the job's initial
  weights; every other worker's parameter names and shapes are checked against them. On the CPU
  the parameters' memory becomes a view of the worker library's flat weight buffer, and their
  gradients a view of its gradient buffer, so nothing is copied between PyTorch and the wire. On
  a CUDA device those buffers, page-locked, stage one copy each way per step.
- The optimizer is the servers' (the job's --optimizer, --lr, schedule, AdamW, ...): the script
  steps no torch optimizer. One that does is caught at the next step (the parameters changed in
  place outside pstrain) with an InvalidArgumentError.
- SYNC with overlap: each parameter's gradient is pushed as soon as autograd has accumulated it
  (a hook on its AccumulateGrad node), last layer first, while backward goes on.
- Data: the scheduler assigns the samples (SYNC: this worker's slice of each global batch;
  ASYNC/SSP: leased batches). Every epoch covers the training set exactly once, with no padding
  and no set_epoch; a dead worker's share is handed to the others. A step refused because the
  membership changed is computed again on the batch the iterator yields next.
- Evaluation is leased too: at each epoch's end the iterator evaluates the test ranges given to
  this worker (`evaluate(model, x, y) -> (loss_sum, correct)`, cross-entropy and top-1 accuracy by
  default) and reports them; the run summary has the job's test loss and accuracy.
- SIGTERM makes the worker finish its step, leave the job and end the iteration.
- Buffers that are not parameters (BatchNorm's running statistics) are averaged over the workers
  by the servers after every step, where DDP copies rank 0's; see buffers="..." below.
- Embedding tables (sparse models): pstrain.torch.Embedding and EmbeddingBag modules of the model
  are tables on the servers, declared with the model, whose rows a step pulls for its batch's keys
  only (embedding_bags: many tables in one round trip) and whose row gradients it pushes with
  the dense gradient. CtrDataset reads Criteo or libsvm files as the C++ worker does; an
  `evaluate` that also returns the predicted probabilities gets the job a test AUC
  (examples/pytorch/ctr.py).
- A data stream (a job started with --data_stream): give the Trainer a CtrStream as its training
  set and no test set. It trains each record once, waiting for new files when it is caught up, and
  trainer.step(loss, scores=probabilities) scores each prediction before its update: the job's
  progressive AUC and log loss per file.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, Sized, Tuple, Union, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset, default_collate

import pstrain
from pstrain import FailedPreconditionError, InvalidArgumentError, Member, ScoreHistogram, Session
from pstrain._torch_ctr import CtrBatch, CtrDataset, CtrStream
from pstrain._torch_tables import (Embedding, EmbeddingBag, _TableBinding, _TableModule, bind_export_rows,
                                   bind_served_rows, embedding_bags)
from pstrain.model_file import read_model_file

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["CtrBatch", "CtrDataset", "CtrStream", "Embedding", "EmbeddingBag", "EvaluateFn", "Trainer",
           "default_evaluate", "embedding_bags", "load_export", "load_state_dict", "serve_tables"]

# A Trainer's `evaluate`: (model, x, y) of a test batch -> (loss_sum, correct), or (loss_sum,
# correct, probabilities of the positive class per sample) for the job's test AUC.
EvaluateFn = Callable[[torch.nn.Module, Any, Any], Union[Tuple[float, int], Tuple[float, int, Any]]]


def default_evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> Tuple[float, int]:
    """(sum of the cross-entropy losses, number of correct top-1 predictions) of a test batch."""
    logits = model(x)
    loss_sum = float(F.cross_entropy(logits, y, reduction="sum").item())
    correct = int((logits.argmax(dim=1) == y).sum().item())
    return loss_sum, correct


def load_state_dict(path: str | os.PathLike[str], model: torch.nn.Module | None = None) -> dict[str, torch.Tensor]:
    """The tensors of a pstrain model file (the job's --final_model) as a state_dict; loaded into
    `model` when given (strict: every parameter, no other)."""
    state = {name: torch.from_numpy(value) for name, value in read_model_file(path).items()}
    if model is not None:
        params: dict[str, torch.Tensor] = dict(model.named_parameters())
        params.update((name, b) for name, b in model.named_buffers() if name in state)
        missing = sorted(set(params) - set(state))
        unexpected = sorted(set(state) - set(params))
        if missing or unexpected:
            raise InvalidArgumentError(
                f"{path}: missing parameters {missing}, unexpected tensors {unexpected}")
        with torch.no_grad():
            for name, value in state.items():
                if tuple(params[name].shape) != tuple(value.shape):
                    raise InvalidArgumentError(
                        f"{path}: tensor '{name}' has shape {list(value.shape)}, the model's is "
                        f"{list(params[name].shape)}")
                params[name].copy_(value)
    return state


def load_export(path: str | os.PathLike[str], model: torch.nn.Module, device: str | torch.device = "cpu"
                ) -> dict[str, Any]:
    """Loads a model export (pstrain-export's folder) into `model` to run it outside the job: the
    dense tensors as load_state_dict does (the export's dense.model), and every pstrain.torch table
    module bound to the export's rows, so that its lookups read them (keys without a row read their
    initial value, as on the servers). Returns pstrain.read_export's dict of the export."""
    from pstrain import read_export
    export = read_export(os.fspath(path))
    # The tables first: a model whose tables do not match is refused before any weight changes.
    bind_export_rows(model, export, torch.device(device), f"the export {os.fspath(path)}")
    load_state_dict(os.path.join(os.fspath(path), "dense.model"), model)
    return export


def serve_tables(model: torch.nn.Module, client: Any, device: str | torch.device = "cpu") -> None:
    """Binds every pstrain.torch table module of `model` to a pstrain.ServeClient, so that its
    lookups ask pstrain-serve for the rows of the newest cut it serves (one round trip per module)."""
    bind_served_rows(model, client, torch.device(device))


def _to_device(batch: Any, device: torch.device) -> Any:
    """`batch` with its tensors (in tuples, lists and dicts, as collate functions build them, or a
    CtrBatch) on `device`; unchanged on the CPU."""
    if device.type == "cpu":
        return batch
    if torch.is_tensor(batch) or isinstance(batch, CtrBatch):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


class _Batches:
    """Gathers a batch of a map-style dataset by sample indices (a dataset with a batch(indices)
    method, such as CtrDataset, builds whole batches itself)."""

    def __init__(self, dataset: Sized | CtrStream, collate_fn: Callable[[list[Any]], Any] | None) -> None:
        self.dataset: Any = dataset  # indexed as a map-style dataset: dataset[i], __getitems__
        self.collate_fn = collate_fn or default_collate
        self.tensors: tuple[torch.Tensor, ...] | None = (
            dataset.tensors if isinstance(dataset, TensorDataset) and collate_fn is None else None)
        batch = getattr(dataset, "batch", None)
        self.batches: Callable[[Sequence[int] | NDArray[np.int64]], Any] | None = (
            batch if callable(batch) and collate_fn is None else None)

    def __call__(self, indices: Sequence[int] | NDArray[np.int64]) -> Any:
        if self.batches is not None:
            return self.batches(indices)
        if self.tensors is not None:
            index = torch.as_tensor(indices, dtype=torch.long)
            return tuple(t[index] for t in self.tensors)
        if hasattr(self.dataset, "__getitems__"):
            return self.collate_fn(self.dataset.__getitems__(list(indices)))
        return self.collate_fn([self.dataset[int(i)] for i in indices])


class Trainer:
    """One worker of a pstrain job, training `model` on `train_set` (any map-style Dataset).

    model        a torch.nn.Module on the CPU or one CUDA device; its trainable float32
                 parameters, in named_parameters() order, are the job's tensors (0-d parameters
                 travel as shape [1]), and its Embedding / EmbeddingBag modules the job's tables
                 (the job's own tables, if it declares any, must be the same). Batches are moved
                 to the model's device.
    train_set    the training data; len() must be the job's (the first worker's) sample count.
                 A job on a data stream (--data_stream) takes a CtrStream of it instead.
    test_set     the test data for the leased evaluation; None: no evaluation (always on a stream).
    scheduler    host:port; default --scheduler in sys.argv or PSTRAIN_SCHEDULER.
    evaluate     (model, x, y) -> (loss_sum, correct) for a test batch; default_evaluate. It may
                 return (loss_sum, correct, probabilities) instead: the predicted probability of
                 the positive class per sample (labels: y > 0.5), reported as a score histogram
                 so that the job's summary has the test AUC (test_auc, final_test_auc).
    collate_fn   builds a batch from samples; default: PyTorch's default_collate (a TensorDataset
                 is indexed directly).
    eval_batch   test samples per evaluation forward pass.
    buffers      "average" (default): the module's floating-point buffers (BatchNorm's running
                 statistics) are tensors of the job too, held by the servers as the sample-weighted
                 mean of every worker's values after each step (SYNC; ASYNC/SSP: the latest push),
                 and loaded into the module after each step and before evaluation. "local": each
                 worker keeps its own. Integer buffers (num_batches_tracked) always stay local.
    """

    # Declared here for mypy, which reads _stage_buffers before _install_hooks sets it: this step's
    # averaged buffers are staged.
    _buffers_staged: bool

    def __init__(self, model: torch.nn.Module, train_set: Sized | CtrStream, test_set: Sized | None = None, *,
                 scheduler: str | None = None, evaluate: EvaluateFn | None = None,
                 collate_fn: Callable[[list[Any]], Any] | None = None, eval_batch: int = 1000,
                 member: Member | None = None, buffers: str = "average") -> None:
        self.model = model
        self.evaluate: EvaluateFn = evaluate or default_evaluate
        self.eval_batch = eval_batch
        self._train = _Batches(train_set, collate_fn)
        self._test = _Batches(test_set, collate_fn) if test_set is not None else None
        self.member = member if member is not None else pstrain.join(scheduler)
        self.rank = self.member.rank
        self.left = False
        self.epoch = 0
        self._pending: int | None = None  # the samples of the batch the loop has, until its step
        self._labels: Any = None
        self._files: list[tuple[int, int]] = []
        if self.member.finished:
            self.session: Session | None = None
            return
        job = self.member.job
        self.job = job
        if job["model"] != "external":
            raise InvalidArgumentError(
                f"the job trains the built-in model '{job['model']}'; start it with --model=external "
                "to train a PyTorch model")
        self._stream = train_set if isinstance(train_set, CtrStream) else None
        if job["data_stream"] and self._stream is None:
            raise InvalidArgumentError(
                f"the job trains on the data stream {job['data_stream']}: give the Trainer "
                "pstrain.torch.CtrStream(job['data_stream'], job['data_format']) as its training set")
        if self._stream is not None and not job["data_stream"]:
            raise InvalidArgumentError(
                f"a CtrStream of {self._stream.dir} for a job without a data stream: start the job with "
                f"--data_stream={self._stream.dir}")
        if self._stream is not None and test_set is not None:
            raise InvalidArgumentError("a job on a data stream has no test set: pass test_set=None (its records "
                                       "are scored before they are trained on: trainer.step(loss, scores=...))")
        self._params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        if not self._params:
            raise InvalidArgumentError("the model has no trainable parameters")
        table_modules = self._table_modules(model)
        self.device = self._params[0][1].device
        for name, p in self._params:
            if p.device != self.device:
                raise InvalidArgumentError(
                    f"parameter '{name}' is on {p.device}, '{self._params[0][0]}' on {self.device}: "
                    "a worker trains on one device")
            if p.dtype != torch.float32:
                raise InvalidArgumentError(f"parameter '{name}' is {p.dtype}, expected torch.float32")
        if self.device.type not in ("cpu", "cuda"):
            raise InvalidArgumentError(
                f"parameter '{self._params[0][0]}' is on {self.device}; a worker trains on the CPU or a CUDA "
                "device: move the model with model.cpu() or model.cuda()")
        if buffers not in ("average", "local"):
            raise InvalidArgumentError(f"buffers='{buffers}', expected 'average' or 'local'")
        # Averaged buffers come after the parameters: the last tensors of the layout.
        self._buffers = [] if buffers == "local" else [
            (name, b) for name, b in model.named_buffers() if b.dtype == torch.float32]
        tensors = self._params + self._buffers
        names = [name for name, _ in tensors]
        shapes = [list(t.shape) if t.dim() > 0 else [1] for _, t in tensors]
        initial = np.concatenate([t.detach().reshape(-1).cpu().numpy() for _, t in tensors]).astype(np.float32)
        # A stream's records are counted by the scheduler as its files arrive.
        self.member.declare_model(names, shapes, initial, 0 if isinstance(train_set, CtrStream) else len(train_set),
                                  len(test_set) if test_set is not None else 0,
                                  averaged=[name for name, _ in self._buffers],
                                  tables=[m.table_spec() for _, m in table_modules])
        self.view = self.member.start()
        self.job = self.member.job  # now with the job's tables (and overlap off if it has any)
        self.session = self.member.new_session(names, shapes)
        if self._stream is not None:
            self._stream.follow(self._session)
        self._tables = _TableBinding(self._session, table_modules, self.device)
        self._tensors = len(self._params) + len(self._buffers)
        self._alias_parameters()
        self._install_hooks()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self.member.request_leave())

    @property
    def _session(self) -> Session:
        """The session, for the methods that run only in a worker in the job (self.session is None
        for one that joined a finished job, which never gets to them)."""
        assert self.session is not None, "a worker that joined a finished job has no session"
        return self.session

    @staticmethod
    def _table_modules(model: torch.nn.Module) -> list[tuple[str, _TableModule]]:
        """(name, module) of the model's table modules; a table belongs to one module."""
        modules = [(name, m) for name, m in model.named_modules() if isinstance(m, _TableModule)]
        owner: dict[str, str] = {}
        for name, m in modules:
            if m.table in owner:
                raise InvalidArgumentError(
                    f"modules '{owner[m.table]}' and '{name}' both look up table '{m.table}': a table belongs to "
                    "one module (call that module wherever the table is needed, once per batch)")
            owner[m.table] = name
        return modules

    # -- the parameters as views of the session's buffers ------------------------------------

    def _alias_parameters(self) -> None:
        """CPU: parameters and .grad become views of the session's own buffers (no copies at all).
        CUDA: they become views of device buffers of the same layout, and the session's buffers
        (page-locked, so the copies are DMA) stage them: weights in after each update, gradients
        out before each push (per tensor as autograd finishes it, with overlap)."""
        self._host_weights = torch.from_numpy(self._session.weights)
        self._host_grad = torch.from_numpy(self._session.gradient)
        if self.device.type == "cuda":
            for host in (self._host_weights, self._host_grad):
                # 0 is cudaSuccess; unpinned memory still works, only slower.
                torch.cuda.cudart().cudaHostRegister(host.data_ptr(), host.numel() * host.element_size(), 0)
            weights = torch.zeros_like(self._host_weights, device=self.device)
            self._grad_flat = torch.zeros_like(self._host_grad, device=self.device)
        else:
            weights = self._host_weights
            self._grad_flat = self._host_grad
        self._device_weights = weights
        self._loaded_version = -1
        self._views: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (parameter, weights, gradient)
        self._offsets: list[int] = []
        offset = 0
        with torch.no_grad():
            for name, p in self._params:
                n = p.numel()
                w = weights[offset:offset + n].view(p.shape)
                g = self._grad_flat[offset:offset + n].view(p.shape)
                p.data = w
                p.grad = g
                self._views.append((p, w, g))
                self._offsets.append(offset)
                offset += n
            for _, b in self._buffers:  # not aliased: the module updates them in forward
                self._offsets.append(offset)
                offset += b.numel()
        self._offsets.append(offset)
        self._versions = [p._version for p, _, _ in self._views]

    def _load_weights(self) -> None:
        """After the session wrote new weights: CUDA parameters are copied to the device, and the
        averaged buffers (every device) into the module."""
        if self._session.weights_version == self._loaded_version:
            return
        with torch.no_grad():
            if self.device.type == "cuda":
                self._device_weights.copy_(self._host_weights)
            for t, (_, b) in enumerate(self._buffers, start=len(self._params)):
                lo, hi = self._offsets[t], self._offsets[t + 1]
                b.copy_(self._host_weights[lo:hi].view(b.shape))
        self._loaded_version = self._session.weights_version
        self._record_versions()

    def _stage_buffers(self) -> None:
        """The averaged buffers' "gradients": (the value last pulled) - (this worker's value), which
        the servers' fixed SGD step of rate 1 turns into the weighted mean of the workers' values."""
        if self._buffers_staged:
            return
        self._buffers_staged = True
        with torch.no_grad():
            for t, (_, b) in enumerate(self._buffers, start=len(self._params)):
                lo, hi = self._offsets[t], self._offsets[t + 1]
                torch.sub(self._host_weights[lo:hi], b.detach().reshape(-1).cpu(), out=self._host_grad[lo:hi])
                self._ready[t] = True

    def _stage_gradients(self, first: int, end: int) -> None:
        """CUDA: copies the gradients of tensors [first, end) to the session's buffer (blocking)."""
        end = min(end, len(self._params))  # averaged buffers are staged by _stage_buffers
        if self.device.type == "cuda" and first < end:
            lo, hi = self._offsets[first], self._offsets[end]
            self._host_grad[lo:hi].copy_(self._grad_flat[lo:hi])

    def _prepare_gradients(self) -> None:
        """Zeroes the gradients and points every .grad at its part of the buffer again (a script's
        zero_grad(set_to_none=True) drops them)."""
        self._grad_flat.zero_()
        for p, _, g in self._views:
            if p.grad is None or p.grad.data_ptr() != g.data_ptr():
                p.grad = g

    def _check_untouched(self) -> None:
        for (p, w, _), version in zip(self._views, self._versions):
            if p.data_ptr() != w.data_ptr():
                name = self._name_of(p)
                raise InvalidArgumentError(
                    f"parameter '{name}' was replaced outside pstrain (its memory is no longer the job's); "
                    "load weights before creating the Trainer")
            if p._version != version:
                name = self._name_of(p)
                raise InvalidArgumentError(
                    f"parameter '{name}' was changed in place outside pstrain (a torch optimizer's step()?): "
                    "the servers apply the job's optimizer, so the script must not step one")

    def _name_of(self, param: torch.Tensor) -> str:
        for name, p in self._params:
            if p is param:
                return name
        return "?"

    def _record_versions(self) -> None:
        self._versions = [p._version for p, _, _ in self._views]

    # -- overlap: gradients pushed as autograd accumulates them ------------------------------

    def _install_hooks(self) -> None:
        self._overlapping = False
        self._accumulators: list[Any] = []  # kept alive: a hook lives as long as its node
        self._ready = [False] * self._tensors
        self._watermark = self._tensors
        self._buffers_staged = False
        if not self.job["overlap"]:
            return
        for t, (_, p) in enumerate(self._params):
            accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
            accumulator.register_hook(lambda *_, t=t: self._gradient_ready(t))
            self._accumulators.append(accumulator)

    def _gradient_ready(self, t: int) -> None:
        if not self._overlapping:
            return
        self._stage_buffers()  # backward has begun, so forward is done: the buffers are final
        self._ready[t] = True
        high = self._watermark
        while self._watermark > 0 and self._ready[self._watermark - 1]:
            self._watermark -= 1
        if self._watermark < high:
            # Tensors [watermark, high) are final: the pusher sends them while backward goes on.
            self._stage_gradients(self._watermark, high)
            self._session.gradient_ready(self._watermark, high)

    # -- the loop ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        if self.session is None:
            return
        try:
            yield from self._batches()
        except pstrain.Error as e:
            # As pstrain-worker does: the scheduler hears of it now, so the job fails at once
            # rather than when this worker's heartbeats stop (the job's own failure, ABORTED, is
            # not reported back).
            self.member.finish(e)
            raise

    def _batches(self) -> Iterator[Any]:
        while True:
            work = self._session.next()
            if work.kind == "done":
                self.left = work.left
                self._load_weights()
                self.member.finish(None)
                return
            self.epoch = work.epoch
            if work.kind == "evaluate":
                self._evaluate(work.begin, work.end)
                continue
            self._load_weights()
            self._check_untouched()
            if len(work.samples) == 0:
                self._push_empty_step()
                continue
            batch = self._train(work.samples)
            # What step(loss, scores=...) scores the predictions against: the batch's labels, and
            # on a stream the files its samples came from.
            self._labels = batch[1] if isinstance(batch, (tuple, list)) and len(batch) == 2 else None
            self._files = self._stream.last_files if self._stream is not None else []
            batch = _to_device(batch, self.device)
            self._prepare_gradients()
            self._ready = [False] * self._tensors
            self._watermark = self._tensors
            self._buffers_staged = False
            self._overlapping = self._session.begin_step()
            self._pending = len(work.samples)
            self._tables.begin_step()
            yield batch
            if self._pending is not None:
                self._tables.end_step()
                self._session.abandon_step()
                self._pending = None
                raise FailedPreconditionError(
                    "the loop asked for the next batch without calling trainer.step(loss) for this one")

    def _push_empty_step(self) -> None:
        """SYNC: this worker's slice of a short last global batch can be empty. It still takes
        part in the step (with no samples, so it weighs nothing), without bothering the loop."""
        self._prepare_gradients()
        self._host_grad.zero_()  # averaged buffers too: no samples, no vote
        if self._session.begin_step():
            self._session.gradient_ready(0, self._tensors)
        self._session.end_step(0.0)
        self._record_versions()

    def step(self, loss: torch.Tensor | float, scores: Any = None, labels: Any = None) -> bool:
        """Pushes the gradients of the batch just yielded (its loss: the batch mean) and installs
        the new weights. True when the servers took the step; False when it must be computed
        again (a membership change): the iterator then yields the batch to compute.

        scores: a binary classifier's predicted probability of the positive class per sample,
        from the forward pass of this loss (before the update it leads to), scored against
        `labels` (> 0.5: positive; default the batch's second element): the job's training AUC,
        and on a data stream its progressive validation (AUC and log loss per file)."""
        if self._pending is None:
            raise FailedPreconditionError("trainer.step(loss) without a batch from the trainer's iterator")
        predictions: NDArray[np.float32] | None = None
        truth: Any = None
        if scores is not None:
            truth = labels if labels is not None else self._labels
            if truth is None:
                raise InvalidArgumentError("trainer.step(loss, scores=...): the batch has no labels to score them "
                                           "against (not an (x, y) pair); pass labels=...")
            predictions = _numpy(scores).astype(np.float32)
            truth = _numpy(truth).astype(np.float32)
            if predictions.size != truth.size:
                raise InvalidArgumentError(
                    f"trainer.step(loss, scores=...): {predictions.size} scores and {truth.size} labels; expected "
                    "one each")
        self._check_untouched()
        count = self._pending
        self._pending = None
        self._tables.end_step()
        self._stage_buffers()
        if self._overlapping and self._watermark > 0:
            self._stage_gradients(0, self._watermark)
            self._session.gradient_ready(0, self._watermark)  # unused parameters, and the end of backward
        elif not self._overlapping:
            self._stage_gradients(0, len(self._params))
        self._overlapping = False
        loss_value = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
        try:
            if predictions is None:
                applied = self._session.end_step(loss_value * count)
            else:
                applied = self._session.end_step(loss_value * count, predictions, truth, self._files)
        except pstrain.Error as e:
            self.member.finish(e)  # see __iter__
            raise
        self._record_versions()
        return applied

    def _evaluate(self, begin: int, end: int) -> None:
        if self._test is None:
            self._session.report_evaluation(0.0, 0, 0)
            return
        self._load_weights()
        was_training = self.model.training
        self.model.eval()
        loss_sum, correct = 0.0, 0
        scores: ScoreHistogram | None = None
        with torch.no_grad():
            for first in range(begin, end, self.eval_batch):
                x, y = self._test(range(first, min(end, first + self.eval_batch)))
                x, y = _to_device((x, y), self.device)
                result = self.evaluate(self.model, x, y)
                if len(result) == 3:
                    if scores is None:
                        scores = ScoreHistogram()
                    # (loss_sum, correct, probabilities): mypy does not narrow a tuple union by len().
                    probabilities = cast(Tuple[float, int, Any], result)[2]
                    scores.add(_numpy(probabilities), _numpy(y))
                loss_sum += float(result[0])
                correct += int(result[1])
        self.model.train(was_training)
        # With scores, the samples are the predictions made: a text file's skipped bad records
        # (bad_records=skip) are records of the range but no samples, as for --model=ctr.
        self._session.report_evaluation(loss_sum, correct, scores.count if scores is not None else end - begin,
                                        scores=scores)
        self._record_versions()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's current dense weights (the servers' after the last step), by name. Embedding
        tables are not in it: their rows stay on the servers."""
        return {name: t.detach().clone() for name, t in self._params + self._buffers}



def _numpy(values: Any) -> NDArray[np.float64]:
    """A tensor or array of numbers as a float64 NumPy vector (for the score histogram)."""
    if torch.is_tensor(values):
        values = values.detach().to("cpu", torch.float64).numpy()
    return np.asarray(values, dtype=np.float64).reshape(-1)
