"""Audit a model's embeddings while Lightning trains it: :class:`IdentifiabilityMonitor`.

    from idaudit.lightning import IdentifiabilityMonitor

    monitor = IdentifiabilityMonitor(gate={"r2_h_to_z_heldout": 0.9}, by_epoch=5)
    trainer = lightning.Trainer(callbacks=[monitor], ...)

The validation step returns a dict (stable-pretraining's ``forward(batch, stage)`` convention:
``{"embedding": …}``); the monitor keeps the last validation rows of the embedding, of the
positive partner's embedding and of the batch's true latents, and at the end of each validation
epoch logs what :func:`idaudit.audit` reports on them. Needs the ``lightning`` extra
(``pip install 'idaudit[lightning]'``); ``import idaudit`` never imports it.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import torch

from idaudit.core.defaults import FLOOR_DRAWS, TEST_FRACTION
from idaudit.core.errors import EXIT_GATE_FAILED, IdauditError, check_seed
from idaudit.core.limits import check
from idaudit.evaluations.gate import KNOWN_METRICS, Threshold, directed_thresholds, evaluate_gate
from idaudit.maths.catalogue import BY_KEY, NEED_TEXT

try:  # the class exists without the extra (the base install imports every module); making one
    from lightning.pytorch import Callback  # says what to install
    from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

    _MISSING: str | None = None
except ImportError as exc:  # pragma: no cover - the base install's check covers it
    Callback = object  # type: ignore[assignment,misc]
    _MISSING = f"{type(exc).__name__}: {exc}"

__all__ = ["EvalRows", "IdentifiabilityMonitor", "RowQueue", "run_label", "scalar_step"]

Action = Literal["stop", "fail"]


class RowQueue:
    """The last ``max_rows`` rows of a few arrays (h, and where given z and h′), oldest
    dropped: a list of batches, trimmed from the front, so it holds at most ``max_rows`` rows
    plus one batch while a batch is added."""

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self.clear()

    def clear(self) -> None:
        self.batches: list[dict[str, np.ndarray]] = []
        self.rows = 0

    def add(self, arrays: dict[str, np.ndarray]) -> None:
        if self.batches and set(arrays) != set(self.batches[0]):
            had, has = sorted(self.batches[0]), sorted(arrays)
            raise IdauditError(f"IdentifiabilityMonitor: a validation batch gives {has} but an "
                               f"earlier one gave {had}; every batch must carry the same keys")
        self.batches.append(arrays)
        self.rows += len(next(iter(arrays.values())))
        while self.rows > self.max_rows:
            first = self.batches[0]
            extra = self.rows - self.max_rows
            size = len(next(iter(first.values())))
            if size <= extra:
                self.batches.pop(0)
                self.rows -= size
            else:
                self.batches[0] = {k: v[extra:] for k, v in first.items()}
                self.rows -= extra

    def arrays(self) -> dict[str, np.ndarray]:
        """The queued rows of each array, oldest first."""
        if not self.batches:
            return {}
        return {k: np.concatenate([b[k] for b in self.batches]) for k in self.batches[0]}


def _rows(value: Any, what: str, keep_float64: bool = False) -> np.ndarray:
    """A batch's tensor (or array) as float32 rows on the CPU, one row per sample
    (``keep_float64``: float64 values stay float64 — the true latents, which the audit of a
    recording reads in double precision as the file holds them)."""
    if hasattr(value, "detach"):
        value = value.detach().to("cpu")
        value = (value if keep_float64 and value.dtype == torch.float64 else value.float()).numpy()
    wide = keep_float64 and np.asarray(value).dtype == np.float64
    arr = np.asarray(value, dtype=np.float64 if wide else np.float32)
    if arr.ndim == 0:
        raise IdauditError(f"IdentifiabilityMonitor: {what} is a scalar, not a batch of rows")
    return arr.reshape(arr.shape[0], -1)


def _loader_list(loaders: Any) -> list[Any]:
    """A trainer's loaders (a loader, or a list, dict or CombinedLoader of them) as a list."""
    if loaders is None:
        return []
    loaders = getattr(loaders, "flattened", loaders)  # Lightning's CombinedLoader
    if isinstance(loaders, Mapping):
        loaders = list(loaders.values())
    if not isinstance(loaders, (list, tuple)):
        loaders = [loaders]
    return list(loaders)


def _world_pairs_of(loaders: Any) -> list[Any]:
    """The :class:`~idaudit.worlds.user_pairs.WorldPairs` datasets of a trainer's training
    loaders (a loader, or a list, dict or CombinedLoader of them)."""
    from idaudit.worlds.user_pairs import WorldPairs

    return [dl.dataset for dl in _loader_list(loaders)
            if isinstance(getattr(dl, "dataset", None), WorldPairs)]


def scalar_step(trainer: Any) -> int:
    """The step Lightning logs a validation's epoch-end scalars at (what ``log_dict`` in
    ``on_validation_epoch_end`` lands on): its logger connector's count of batches that
    stepped, one behind ``trainer.global_step`` while a training epoch validates.

    Args:
        trainer: the Lightning trainer.

    Returns:
        The step; ``trainer.global_step`` where the fit loop keeps no such count.
    """
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    step = getattr(loop, "_batches_that_stepped", None)
    return int(trainer.global_step if step is None else step)


def run_label(trainer: Any) -> str:
    """The run as its first logger names it, ``NAME/version_V`` (TensorBoard's and the CSV
    logger's folder), ``NAME/V`` for a version that is not a number; ``"run"`` without one.

    Args:
        trainer: the Lightning trainer.

    Returns:
        The label the monitor's figures are titled with.
    """
    for logger in getattr(trainer, "loggers", []) or []:
        name, version = getattr(logger, "name", None), getattr(logger, "version", None)
        if name is None and version is None:
            continue
        version = f"version_{version}" if isinstance(version, int) else version
        return "/".join(str(part) for part in (name, version) if part not in (None, ""))
    return "run"


#: the world options EvalRows takes: each is the `idaudit audit` flag of the same name
#: (a synthetic world's; a recording's, with ``data``)
EVAL_ROWS_OPTIONS = ("dim", "source", "alpha", "rho", "layers")
RECORDING_OPTIONS = ("observations", "latents", "episodes", "angles", "stride", "rho")


class EvalRows(torch.utils.data.Dataset):
    """A world's evaluation set as validation rows: item i is the dict ``{"x", "x_prime",
    "z"}`` of row i of ``World.eval_set(n, seed)`` — the very rows ``idaudit audit CHECKPOINT
    --world NAME --n-eval n --seed seed`` (a recording: ``--data FILE …``) embeds, so that the
    monitor's numbers on them are what that command reports
    (:meth:`IdentifiabilityMonitor.commands`).

    Args:
        world: a synthetic world's name (spiral, nvp, coupling …); ignored with ``data``.
        n: the evaluation pairs (None: the audit's default, 10 000; a recording: all its
            held-out pairs).
        seed: the evaluation set's seed (``--seed``).
        data: a recording of the user's own world (docs/own-world.md): its held-out pairs.
        **options: world options, each one of :data:`EVAL_ROWS_OPTIONS` (``rho=0.9``), or with
            ``data`` of :data:`RECORDING_OPTIONS` (``latents="qpos"``).
    """

    def __init__(self, world: str = "spiral", n: int | None = None, seed: int = 0,
                 data: str | None = None, **options: Any) -> None:
        from idaudit.worlds import as_world, make_spec
        from idaudit.worlds.recorded import RecordedWorld
        from idaudit.worlds.synthetic import SyntheticWorld

        takes = EVAL_ROWS_OPTIONS if data is None else RECORDING_OPTIONS
        unknown = sorted(set(options) - set(takes))
        if unknown:
            raise IdauditError(f"EvalRows: {unknown[0]} is not an option it takes "
                               f"{'with data ' if data is not None else ''}(it takes "
                               f"{', '.join(takes)})")
        check_seed(seed, "seed")
        if n is not None:
            check("n_eval", n, "n")
        self.options = {k: v for k, v in options.items() if v is not None}
        self.data = None if data is None else str(data)
        self.spec = make_spec(None if data is not None else world, data=self.data,
                              **self.options)
        built = as_world(self.spec)
        if not isinstance(built, (SyntheticWorld, RecordedWorld)):
            raise IdauditError(f"EvalRows: world {world!r} is not a synthetic world or a "
                               "recording (its evaluation set is not drawn from a seed)")
        self.world = self.spec.name if data is None else f"recording {self.data}"
        self.n, self.seed = n, seed
        self.eval = built.eval_set(n, seed)

    def __len__(self) -> int:
        return len(self.eval.z)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": self.eval.x[i], "x_prime": self.eval.x_prime[i], "z": self.eval.z[i]}

    def flags(self) -> list[str]:
        """The ``idaudit audit`` (and ``embed``) flags that evaluate on these rows."""
        words = ["--world", self.world] if self.data is None else ["--data", self.data]
        for k in (EVAL_ROWS_OPTIONS if self.data is None else RECORDING_OPTIONS):
            if k in self.options:
                value = self.options[k]
                words += ["--" + k, ",".join(map(str, value)) if isinstance(value, (list, tuple))
                          else str(value)]
        return [*words, "--n-eval", str(len(self)), "--seed", str(self.seed)]

    def describe(self) -> str:
        """These rows in words: the world, its options, how many, the seed."""
        opts = "".join(f", {k}={v}" for k, v in self.options.items())
        what = f"world {self.world}" if self.data is None else f"the {self.world}"
        return f"the evaluation set of {what}{opts} ({len(self)} pairs, seed {self.seed})"


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite real numbers (flags as 0/1) among ``metrics``; lists and NaN/±inf left out."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, (bool, np.bool_, int, float, np.integer, np.floating)) \
                and math.isfinite(float(v)):
            out[k] = float(v)
    return out


#: what each argument of IdentifiabilityMonitor may be — ("key", None allowed or not) a
#: non-empty string; ("limit", LIMITS name) an interval; ("choice", values); ("type", type);
#: ("index", None allowed or not) a non-negative integer; ("seed", _) a seed —
#: and the argument it needs given (None: nothing), with the reason the error gives
ARGUMENTS: dict[str, tuple[tuple[str, Any], str | None, str]] = {
    "embedding_key": (("key", False), None, ""),
    "latents_key": (("key", True), None, ""),
    "pair_key": (("key", True), None, ""),
    "rho": (("limit", "rho"), "pair_key", "rho is the correlation of the pairs (h, h′); it "
            "needs pair_key"),
    "max_rows": (("limit", "n_eval"), None, ""),
    "floor_draws": (("limit", "floor_draws"), "latents_key",
                    "floor_draws needs the true latents z (latents_key)"),
    "test_fraction": (("limit", "test_fraction"), "latents_key",
                      "test_fraction needs the true latents z (latents_key)"),
    "seed": (("seed", None), None, ""),
    "prefix": (("type", str), None, ""),
    "dataloader_idx": (("index", True), None, ""),
    "gate": (("gate", None), None, ""),  # checked by directed_thresholds
    "by_epoch": (("index", False), "gate", "by_epoch applies to a gate; none was given"),
    "action": (("choice", ("stop", "fail")), "gate", "action applies to a gate; none was "
               "given"),
}


def _check_arguments(given: dict[str, Any]) -> None:
    """One validator for :data:`ARGUMENTS`: each given value's form, then what it needs.

    Args:
        given: the monitor's arguments by name (None: not given).

    Example:
        >>> _check_arguments({"embedding_key": "h", "rho": None})
    """
    what = "IdentifiabilityMonitor: "
    for name, value in given.items():
        (form, arg), _, _ = ARGUMENTS[name]
        if form == "key" and (value is not None or not arg) and \
                not (isinstance(value, str) and value):
            raise IdauditError(f"{what}{name} must be a key (a non-empty string)"
                               f"{' or None' if arg else ''}, got {value!r}")
        if value is None:
            continue
        if form == "limit":
            check(arg, value, name)
        elif form == "seed":
            check_seed(value, name)
        elif form == "type" and not isinstance(value, arg):
            raise IdauditError(f"{what}{name} must be a string, got {value!r}")
        elif form == "index" and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise IdauditError(f"{what}{name} must be a non-negative integer"
                               f"{' or None' if arg else ''}, got {value!r}")
        elif form == "choice" and value not in arg:
            raise IdauditError(f"{what}{name} must be {' or '.join(map(repr, arg))}, got "
                               f"{value!r}")
    for name, ((_, _), needs, why) in ARGUMENTS.items():
        if needs is not None and given.get(name) is not None and given.get(needs) is None:
            raise IdauditError(what + why)


class IdentifiabilityMonitor(Callback):
    """A Lightning callback: idaudit's audit of the validation embeddings, each validation.

    **What it reads.** Each validation batch (``on_validation_batch_end``, on every rank):
    the step's output dict under ``embedding_key`` (h), under ``pair_key`` the positive
    partner's embedding h′ (None: none), and under ``latents_key`` the true latents z (None:
    none), from the output dict where it holds them (as stable-pretraining's forwards hand
    labels to callbacks, row for row with a multi-view embedding), else from the batch dict.
    h′ and z may be absent from every batch (z on real data); they may not come and go. Each
    is detached, copied to the CPU as float32 and flattened to rows; the last ``max_rows``
    rows are kept (oldest dropped) and the queue is emptied at each validation's start, so
    the metrics describe the weights being validated. Under DDP the ranks' rows are gathered
    on rank 0 at the validation's end, interleaved as a DistributedSampler dealt them. Only
    the ``dataloader_idx`` validation loader is read (None: every one).

    **What it logs.** At each validation epoch's end (not the sanity check), rank 0 runs
    :func:`idaudit.audit` on the queued rows: with z, the audit with latents (held-out and
    in-sample R²(h → z) and R²(z → h), orthogonality and Procrustes errors, MCC, ε, the
    Gaussianity test, effective rank, the uninformative floor of ``floor_draws`` shuffles
    (None: the audit's default; 0: none), and δ, D and the bound with h′ and ``rho``), joined
    by the label-free pair signals (ρ̂, canonical correlations, δ(ρ̂)) when h′ is there;
    without z, the label-free audit (ε and its floor, effective rank, Gaussianity; with h′
    the pair signals, and with ``rho`` the bound). ``test_fraction`` and ``seed`` are the
    audit's. Every finite number is logged by ``pl_module.log_dict`` as ``prefix + key``
    (flags as 0/1), on every rank alike (rank 0's values broadcast), so a checkpoint or
    early-stopping callback can monitor one; :attr:`metrics` holds the last values;
    docs/metrics.md says what each key means.

    **The gate.** ``gate``: ``{metric: threshold}`` (a minimum for a metric that is better
    higher, a maximum for one better lower, as ``idaudit metrics`` lists them) or
    ``{"min": {…}, "max": {…}}``. At the first validation of epoch ``by_epoch`` (default 0)
    and every one after, a missed threshold — or an audit that cannot conclude (collapsed
    embedding, NaN, too few rows) — stops the run (``action="stop"``: ``trainer.should_stop``,
    decided on rank 0 and broadcast, so every rank stops alike) or raises
    :class:`~idaudit.core.errors.IdauditError` with exit code 1 naming the metric, its value
    and the threshold (``action="fail"``). :attr:`stopped_epoch` and :attr:`stop_reason` say
    when and why. Unknown metrics, and metrics these inputs cannot give (one that needs z
    without ``latents_key``, …), are refused when the monitor is made.

    **Figures.** With ``log_figures``, the audit's figures (:mod:`idaudit.evaluations.figures`:
    held-out predictions against z with R², ceiling and floor; for a 2-D latent the embedding
    coloured by its angle and radius; the bound beside its terms; without z the canonical
    correlations and the spectrum) are drawn as one image at the first validation and every
    ``figures_every``-th after, titled with the run, the epoch and the step
    (:attr:`figure_title`, :func:`run_label`), and sent as ``prefix + "figure"`` at the step
    its scalars are logged at (:func:`scalar_step`) to each logger that takes images: one with
    a ``log_image`` method (Weights & Biases, Neptune …), or whose ``experiment`` has
    ``add_image`` (TensorBoard's ``SummaryWriter``);
    :attr:`figure` holds the last one (H × W × 3 uint8). Needs the ``plot`` extra.

    **Rows.** :attr:`rows` names the rows of the last audit, and each logger's
    hyper-parameters hold them (``prefix + "rows"``) with the command that gives the same
    numbers (``prefix + "command"``, or why none does): validating on an :class:`EvalRows`
    set, all its rows in order, with h′ and the world's ρ, :meth:`commands` gives the
    ``idaudit audit`` line for a checkpoint Lightning saved.

    **Cost.** One audit of ``max_rows`` × m rows per validation on rank 0's CPU,
    O(max_rows·m² + m³); the training waits for it. Queueing a batch is one copy to the CPU.
    Measured (``on_validation_epoch_end`` of real ``trainer.validate`` runs, 4096 rows, z of 2
    latents, h′ and ρ, median of 7, a 2-core machine under a load of 11, one BLAS thread):
    0.07 s CPU (0.17 s wall) at width m = 2, 0.69 s CPU (1.4 s wall) at m = 512, the floor
    0.01 s and 0.12 s of it. With OpenBLAS's default threads on that loaded machine, 9.4 s CPU
    and 20 s wall at m = 512 (threads waiting for each other): ``OPENBLAS_NUM_THREADS=1``
    where cores are shared. docs/lightning.md has the table.
    """

    def __init__(self, *, embedding_key: str = "embedding", latents_key: str | None = "z",
                 pair_key: str | None = None, rho: float | None = None, max_rows: int = 4096,
                 prefix: str = "idaudit/", gate: Mapping[str, Any] | None = None,
                 by_epoch: int | None = None, action: Action | None = None,
                 floor_draws: int | None = None, test_fraction: float | None = None, seed: int = 0,
                 dataloader_idx: int | None = 0, log_figures: bool = False,
                 figures_every: int | None = None) -> None:
        if _MISSING is not None:
            raise IdauditError("IdentifiabilityMonitor needs the lightning package (pip install "
                               f"'idaudit[lightning]'): {_MISSING}")
        super().__init__()
        given = {"embedding_key": embedding_key, "latents_key": latents_key,
                 "pair_key": pair_key, "rho": rho, "max_rows": max_rows,
                 "floor_draws": floor_draws, "test_fraction": test_fraction, "seed": seed,
                 "prefix": prefix, "dataloader_idx": dataloader_idx, "gate": gate,
                 "by_epoch": by_epoch, "action": action}
        _check_arguments(given)
        self._check_figures(log_figures, figures_every)
        self.thresholds: list[Threshold] = []
        if gate is not None:
            self.thresholds = directed_thresholds(dict(gate), "IdentifiabilityMonitor gate",
                                                  KNOWN_METRICS)
            if not self.thresholds:
                raise IdauditError("IdentifiabilityMonitor: the gate names no metric")
            self._check_needs(latents_key, pair_key, rho, floor_draws)
        self.embedding_key, self.latents_key, self.pair_key = embedding_key, latents_key, pair_key
        self.rho, self.max_rows, self.prefix = rho, max_rows, prefix
        self.by_epoch = 0 if by_epoch is None else by_epoch
        self.action: Action = action or "stop"
        self.floor_draws, self.test_fraction, self.seed = floor_draws, test_fraction, seed
        self.dataloader_idx = dataloader_idx
        self.log_figures, self.figures_every = log_figures, figures_every or 1
        self.validations = 0  # validations audited so far (the figures' count)
        self.figure: np.ndarray | None = None
        self.figure_title: str | None = None  # the last figure's title: run, epoch, step
        self._report: Any = None  # the last audit's inputs and report, for its figure
        self.queue = RowQueue(max_rows)
        self.metrics: dict[str, float] = {}
        self.stopped_epoch: int | None = None
        self.stop_reason: str | None = None
        self._error: str | None = None  # a batch's bad input, raised at the epoch's end
        self.rows: dict[str, Any] | None = None  # the last audit's rows named (describe_rows)
        self._set: EvalRows | None = None  # the validation set, where it is an EvalRows
        self._logged_rows: str | None = None  # the rows' text last sent to the loggers

    @staticmethod
    def _check_figures(log_figures: Any, figures_every: Any) -> None:
        if not isinstance(log_figures, bool):
            raise IdauditError(f"IdentifiabilityMonitor: log_figures must be True or False, got "
                               f"{log_figures!r}")
        if figures_every is not None:
            if not log_figures:
                raise IdauditError("IdentifiabilityMonitor: figures_every applies to "
                                   "log_figures=True")
            if isinstance(figures_every, bool) or not isinstance(figures_every, int) \
                    or figures_every < 1:
                raise IdauditError("IdentifiabilityMonitor: figures_every must be an integer "
                                   f">= 1, got {figures_every!r}")
        if log_figures:
            from idaudit.evaluations.figures import PLOT_MISSING, have_matplotlib

            if not have_matplotlib():
                raise IdauditError(f"IdentifiabilityMonitor: log_figures {PLOT_MISSING}")

    def _check_needs(self, latents_key: str | None, pair_key: str | None, rho: float | None,
                     floor_draws: int | None) -> None:
        """Refuse a gated metric these inputs can never give (from the catalogue's needs)."""
        have = {"z": latents_key is not None, "h_prime": pair_key is not None,
                "rho": rho is not None, "floor": floor_draws != 0, "bootstrap": False,
                "angle_law": False}
        how = {"z": "latents_key", "h_prime": "pair_key", "rho": "rho", "floor": "floor_draws > 0",
               "bootstrap": "", "angle_law": ""}
        for t in self.thresholds:
            missing = [n for n in sorted(BY_KEY[t.metric].needs) if not have[n]]
            if missing:
                n = missing[0]
                give = f" (give {how[n]})" if how[n] else " (the monitor does not compute it)"
                raise IdauditError(f"IdentifiabilityMonitor: the gate's {t.metric} needs "
                                   f"{NEED_TEXT[n]}{give}")

    # ---- collecting ------------------------------------------------------------------------

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        """Fresh pairs each epoch: set the epoch of every WorldPairs the model trains on
        (Lightning sets a sampler's epoch, never a dataset's)."""
        for data in _world_pairs_of(getattr(trainer, "train_dataloader", None)):
            if data.epoch != trainer.current_epoch:
                data.set_epoch(trainer.current_epoch)

    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.queue.clear()
        self._error = None
        loaders = _loader_list(getattr(trainer, "val_dataloaders", None))
        index = self.dataloader_idx or 0
        data = getattr(loaders[index], "dataset", None) if index < len(loaders) else None
        self._set = data if isinstance(data, EvalRows) else None

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        if trainer.sanity_checking or self._error is not None:
            return
        if self.dataloader_idx is not None and dataloader_idx != self.dataloader_idx:
            return
        try:  # raised at the epoch's end, on every rank alike
            self._queue_batch(outputs, batch)
        except IdauditError as exc:
            self._error = str(exc)

    def _queue_batch(self, outputs: Any, batch: Any) -> None:
        if not isinstance(outputs, Mapping) or self.embedding_key not in outputs:
            what = (f"a dict with keys {sorted(map(str, outputs))}"
                    if isinstance(outputs, Mapping) else type(outputs).__name__)
            raise IdauditError(f"IdentifiabilityMonitor: the validation step must return a dict "
                               f"holding the embedding under {self.embedding_key!r}; it returned "
                               f"{what}")
        arrays = {"h": _rows(outputs[self.embedding_key], repr(self.embedding_key))}
        if self.pair_key is not None and self.pair_key in outputs:
            arrays["h_prime"] = _rows(outputs[self.pair_key], repr(self.pair_key))
        if self.latents_key is not None:  # the step's output first (stable-pretraining puts
            for where, source in (("output", outputs), ("batch", batch)):  # labels there)
                if isinstance(source, Mapping) and self.latents_key in source:
                    arrays["z"] = _rows(source[self.latents_key],
                                        f"the {where}'s {self.latents_key!r}", keep_float64=True)
                    break
        n = len(arrays["h"])
        for k, v in arrays.items():
            if len(v) != n:
                raise IdauditError(f"IdentifiabilityMonitor: {k} has {len(v)} rows in a batch "
                                   f"whose embedding has {n}")
        self.queue.add(arrays)

    # ---- auditing --------------------------------------------------------------------------

    def audit(self) -> tuple[dict[str, Any], str | None]:
        """The metrics of the queued rows and, where the audit cannot conclude, why; names
        the rows in :attr:`rows` (:meth:`describe_rows`)."""
        from idaudit.evaluations.audit import audit_inputs
        from idaudit.evaluations.inputs import AuditInputs
        from idaudit.maths.labelfree import label_free_metrics

        self._report = None  # a validation with no rows has no figure (not the last one's)
        rows = self.queue.arrays()
        self.rows = self.describe_rows(rows)
        if not rows:
            return {}, "no validation rows were queued"
        z, h, hp = rows.get("z"), rows["h"], rows.get("h_prime")
        rho = self.rho if hp is not None else None
        law = self._set.eval if self._set is not None and z is not None else None
        # an EvalRows set's z has a known law (white, its angles): the audit reads it as
        # `idaudit audit` does on that world; any other z is standardised on the rows
        inp = AuditInputs(z=z, h=h, h_prime=hp, rho=rho,
                          circular=tuple(law.circular) if law is not None else (),
                          z_white=bool(law is not None and law.z_white))
        options: dict[str, Any] = {"seed": self.seed}
        if z is not None:
            options.update(floor_draws=self.floor_draws, test_fraction=self.test_fraction)
        report = audit_inputs(inp, **options)
        self._report = (inp, report)
        metrics = dict(report.metrics)
        if report.verdict == "inconclusive":
            return metrics, report.reason
        if z is not None and hp is not None:  # the pair signals only a label-free audit has
            pairs = label_free_metrics(h, hp, rho, gauss_slices=0)
            metrics.update({k: v for k, v in pairs.items() if k not in metrics})
        return metrics, None

    def describe_rows(self, rows: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """The queued ``rows`` named: which validation rows, and whether ``idaudit audit``
        reproduces the audit of them (all the rows of an :class:`EvalRows` set, in its order,
        with h′ and the world's ρ).

        Args:
            rows: the queued arrays (``h``, and where given ``z``, ``h_prime``).

        Returns:
            ``{"text": …, "exact": bool, "why_not": str | None}``.
        """
        n = len(rows["h"]) if rows else 0
        where = ("every validation loader" if self.dataloader_idx is None
                 else f"validation loader {self.dataloader_idx}")
        split = (f"; split seed {self.seed}, held-out share "
                 f"{self.test_fraction if self.test_fraction is not None else TEST_FRACTION}, "
                 f"floor draws {self.floor_draws if self.floor_draws is not None else FLOOR_DRAWS}")
        data = self._set
        if data is None or not rows or "z" not in rows:
            why = ("the validation set is not an idaudit.lightning.EvalRows" if data is None
                   else "no true latents z were queued")
            return {"text": f"{where}: the last {n} validation rows{split}", "exact": False,
                    "why_not": why}
        every = n == len(data) and np.array_equal(rows["z"], data.eval.z.numpy())
        text = (f"{where}: {'all' if every else 'the last'} {n} rows of {data.describe()}"
                f"{', in order' if every else ''}{split}")
        why = None
        if not every:
            why = (f"the monitor audited {n} rows, not the {len(data)} of the set in its order "
                   "(max_rows, limit_val_batches, drop_last, a shuffled or distributed sampler)")
        elif "h_prime" not in rows:
            why = "no h′ was queued (pair_key): idaudit audit embeds the pairs' x′ too"
        elif self.rho != data.eval.rho:
            why = f"the monitor's rho {self.rho} is not the world's {data.eval.rho}"
        return {"text": text, "exact": why is None, "why_not": why}

    def commands(self, checkpoint: str, arch: str, *, key: str = "state_dict",
                 prefix: str | None = None) -> list[list[str]]:
        """The command line(s) that give the last audit's numbers on the same rows from a
        checkpoint Lightning saved: ``idaudit audit CHECKPOINT --key state_dict --prefix
        PREFIX --arch ARCH`` on the :class:`EvalRows` set's world, size and seed — or, where
        the monitor's split seed is not the set's, ``idaudit embed`` of those rows, then
        ``idaudit audit`` of the arrays with the monitor's seed.

        Args:
            checkpoint: the ``.ckpt`` (``ModelCheckpoint``'s, ``trainer.save_checkpoint``'s).
            arch: ``module:factory`` that builds the encoder its weights load into.
            key: the checkpoint's entry holding the weights (Lightning's ``state_dict``).
            prefix: the encoder's weights' prefix in it (the module's attribute, ``net.``).

        Returns:
            Each command as its words (``idaudit``, the command, …).

        Raises:
            IdauditError: no validation was audited yet, or no command gives these rows.
        """
        if self.rows is None:
            raise IdauditError("IdentifiabilityMonitor: no validation has been audited yet")
        if not self.rows["exact"]:
            raise IdauditError("IdentifiabilityMonitor: no idaudit command audits the rows "
                               f"the monitor did: {self.rows['why_not']}")
        data = self._set
        assert data is not None
        load = [checkpoint, "--key", key, *(["--prefix", prefix] if prefix else []),
                "--arch", arch]
        split = [*(["--test-fraction", str(self.test_fraction)]
                   if self.test_fraction is not None else []),
                 *(["--floor-draws", str(self.floor_draws)] if self.floor_draws is not None
                   else [])]
        if self.seed == data.seed:
            return [["idaudit", "audit", *load, *data.flags(), *split]]
        return [["idaudit", "embed", *load, *data.flags(), "--out", "rows.npz"],
                ["idaudit", "audit", "rows.npz", "--seed", str(self.seed), *split]]

    def _log_rows(self, trainer: Any) -> None:
        """Name the audited rows, and the command that reproduces their numbers, in each
        logger's hyper-parameters (``hparams.yaml``, TensorBoard's HPARAMS), when they
        change."""
        if self.rows is None or self.rows["text"] == self._logged_rows:
            return
        self._logged_rows = self.rows["text"]
        if self.rows["exact"]:
            command = " && ".join(shlex.join(words) for words in self.commands(
                "CHECKPOINT.ckpt", "MODULE:FACTORY", prefix="ATTRIBUTE."))
        else:
            command = f"none: {self.rows['why_not']}"
        for logger in trainer.loggers:
            logger.log_hyperparams({self.prefix + "rows": self.rows["text"],
                                    self.prefix + "command": command})

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        decision: tuple[str, str] | None = None  # ("error" | "miss", the line)
        if trainer.world_size > 1:
            self._gather()
        self.metrics = {}
        if trainer.is_global_zero:
            decision = self._decide(trainer)
        # every rank learns rank 0's numbers and decision (a rank that stopped alone would hang
        # the rest), and logs the numbers: the same on every rank, so "max" across them is
        # each value exactly, and they can drive other callbacks (a checkpoint's monitor)
        decision, self.metrics = trainer.strategy.broadcast((decision, self.metrics), src=0)
        if self.metrics:
            pl_module.log_dict({self.prefix + k: v for k, v in self.metrics.items()},
                               on_step=False, on_epoch=True, sync_dist=trainer.world_size > 1,
                               reduce_fx="max")
        if decision is None:
            return
        kind, line = decision
        if kind == "error":
            raise IdauditError(line)
        self.stopped_epoch, self.stop_reason = trainer.current_epoch, line
        if self.action == "fail":
            raise IdauditError(line, exit_code=EXIT_GATE_FAILED)
        rank_zero_info(f"{line}: stopping")
        trainer.should_stop = True

    def _gather(self) -> None:
        """Several processes: rank 0's queue becomes every rank's rows, interleaved row by row
        (rank 0's first row, rank 1's first, …) — a DistributedSampler's order, so the audit
        sees the rows one process would have seen — where the ranks hold equally many, else
        rank after rank; the last ``max_rows`` are kept. A rank's bad batch is rank 0's error."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        mine = (self.queue.arrays(), self._error)
        got: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(mine, got, dst=0)
        if got is None:
            return
        self._error = next((error for _, error in got if error is not None), None)
        parts = [arrays for arrays, _ in got if arrays]
        self.queue.clear()
        if self._error is not None or not parts:
            return
        if any(set(p) != set(parts[0]) for p in parts):
            self._error = ("IdentifiabilityMonitor: the ranks' validation steps give different "
                           f"keys: {sorted({tuple(sorted(p)) for p in parts})}")
            return
        equal = len({len(p["h"]) for p in parts}) == 1
        self.queue.add({k: np.stack([p[k] for p in parts], axis=1).reshape(-1, parts[0][k].shape[1])
                        if equal else np.concatenate([p[k] for p in parts]) for k in parts[0]})

    def _decide(self, trainer: Any) -> tuple[str, str] | None:
        """Rank 0: audit the queued rows (into :attr:`metrics`) and say whether the gate is
        missed."""
        if self._error is not None:
            return "error", self._error
        try:
            metrics, reason = self.audit()
        except IdauditError as exc:
            return "error", f"IdentifiabilityMonitor: {exc}"
        self.metrics = _scalars(metrics)
        self._log_rows(trainer)
        if self.log_figures and self.validations % self.figures_every == 0:
            self._send_figure(trainer)
        self.validations += 1
        epoch = trainer.current_epoch
        if reason is not None:
            rank_zero_warn(f"IdentifiabilityMonitor: epoch {epoch}: the audit is inconclusive: "
                           f"{reason}")
        if not self.thresholds or epoch < self.by_epoch:
            return None
        where = f"idaudit gate missed at epoch {epoch} (by_epoch {self.by_epoch})"
        if reason is not None:
            return "miss", f"{where}: the audit is inconclusive: {reason}"
        try:
            checked = evaluate_gate(metrics, [dataclasses.replace(t) for t in self.thresholds])
        except IdauditError as exc:
            return "error", f"IdentifiabilityMonitor: {exc}"
        failed = [t for t in checked if not t.passed]
        if not failed:
            return None
        return "miss", f"{where}: " + ", ".join(
            f"{t.metric} = {t.actual:.4g} (needs {'≥' if t.op == 'min' else '≤'} {t.value:g})"
            for t in failed)

    def _send_figure(self, trainer: Any) -> None:
        """Draw the last audit's figures and send them to every logger that takes images."""
        from idaudit.evaluations.figures import Drawn, audit_figure, rgb_array

        if self._report is None:  # no rows were queued: nothing to draw
            return
        inp, report = self._report
        step = scalar_step(trainer)  # the step of the scalars it illustrates
        self.figure_title = f"{run_label(trainer)} · epoch {trainer.current_epoch} · step {step}"
        fig = audit_figure([Drawn(inp, dataclasses.replace(report, source=self.figure_title),
                                  self.seed, self.test_fraction)])
        if fig is None:  # an inconclusive audit: nothing to draw
            return
        self.figure = rgb_array(fig)
        sent = [send_image(logger, self.prefix + "figure", self.figure, step)
                for logger in trainer.loggers]
        if not any(sent):
            rank_zero_warn("IdentifiabilityMonitor: log_figures: no logger of this trainer "
                           "takes images (TensorBoard, or one with log_image)")

    @property
    def state_key(self) -> str:
        """Monitors of one trainer log under different prefixes; each keeps its own state."""
        return self._generate_state_key(prefix=self.prefix)

    def state_dict(self) -> dict[str, Any]:
        return {"stopped_epoch": self.stopped_epoch, "stop_reason": self.stop_reason}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.stopped_epoch = state_dict.get("stopped_epoch")
        self.stop_reason = state_dict.get("stop_reason")


def send_image(logger: Any, tag: str, image: np.ndarray, step: int) -> bool:
    """Send an H × W × 3 uint8 ``image`` to a Lightning logger that takes images — one with
    ``log_image`` (Weights & Biases, Neptune …), or whose ``experiment`` has ``add_image``
    (TensorBoard's ``SummaryWriter``); whether it took it."""
    if callable(getattr(logger, "log_image", None)):
        logger.log_image(key=tag, images=[image], step=step)
        return True
    experiment = getattr(logger, "experiment", None)
    if callable(getattr(experiment, "add_image", None)):
        experiment.add_image(tag, image, global_step=step, dataformats="HWC")
        return True
    return False
