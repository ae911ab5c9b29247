"""From a target to arrays, the way every evaluation embeds: the evaluation set an encoder is
embedded on (``eval_set_for``: the data, the world, or a checkpoint's own), the input it is fed
(``input_adapter``), its embeddings (``inputs_for_encoder``) and ``idaudit embed``
(``run_embed``, and :func:`embed`, its keyword form). Audit, consistency and plan are thin over it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from idaudit.core.errors import IdauditError, check_seed, printable
from idaudit.core.outputs import check_outputs
from idaudit.core.request_parts import EncoderOptions, LoadOptions, WorldChoice
from idaudit.core.requests import EmbedRequest, flat_options, unknown_options
from idaudit.evaluations.inputs import (
    AuditInputs,
    TooFewRows,
    check_embedding_options,
    frame_sample,
    rows_reason,
)
from idaudit.loading.arrays import Arrays
from idaudit.loading.loaders import open_target, where_to_embed
from idaudit.loading.opened import LoadedEncoder
from idaudit.maths.linear import to_numpy

__all__ = ["PROBE_ROWS", "Placed", "check_embed_outputs", "embed", "embed_targets", "files_read",
           "input_adapter", "inputs_for_encoder", "inputs_from_arrays", "placed", "planned_rows",
           "probe_input", "run_embed", "tried_then_set", "try_encoders", "try_first"]


def inputs_from_arrays(arrays: Arrays) -> AuditInputs:
    return AuditInputs(**vars(arrays))


def embed_targets(targets: list[Any], load: LoadOptions
                  ) -> list[tuple[Any, LoadOptions, str | None]]:
    """(target, the load options it opens with, its name in a report or None: its own) of
    each target; with ``embed`` several functions by name (``{"backbone": f, "projector":
    g}``) one encoder gives one target per function, named ``NAME`` (a path: ``PATH ·
    NAME``)."""
    if not isinstance(load.embed, dict):
        return [(t, load, None) for t in targets]
    if len(targets) != 1:
        raise IdauditError(f"--embed as several functions (a dict, one target each) takes one "
                           f"encoder, got {len(targets)} targets")
    target = targets[0]
    path = isinstance(target, (str, os.PathLike))
    return [(target, dataclasses.replace(load, embed=fn), f"{target} · {name}" if path else name)
            for name, fn in load.embed.items()]


#: where an encoder is embedded, as :func:`~idaudit.loading.loaders.where_to_embed` says: (a
#: World or its spec, the directory its relative paths are found from)
Placed = tuple[Any, Any]


def placed(loaded: LoadedEncoder, opts: EncoderOptions) -> Placed:
    """Where ``loaded`` is embedded under ``opts`` (the world's spec made once: a recording's
    states read, a collection found), for the probe, the planned rows and the set to share."""
    return where_to_embed(loaded, opts.world.world, opts.data, opts.world.world_options())


def _own_n_eval(loaded: LoadedEncoder, opts: EncoderOptions, n_eval: int | None) -> int | None:
    """``n_eval``, or for a checkpoint on its own world the size its training's set had."""
    if opts.world.world is None and opts.data is None and loaded.world is not None:
        return n_eval if n_eval is not None else loaded.train.get("n_eval")
    return n_eval


def eval_set_for(loaded: LoadedEncoder, opts: EncoderOptions, n_eval: int | None = None,
                 seed: int | None = None, where: Placed | None = None
                 ) -> tuple[Any, Any, int]:
    """(world spec, evaluation set, its seed) to embed an encoder on: ``opts.data`` or
    ``opts.world`` when given, ``n_eval`` inputs from ``seed`` — a kind that can evaluate
    without building the world (Reacher without a dataset renders evaluation pairs) does so —
    else a checkpoint's own world with its training's eval-set size and seed."""
    from idaudit.worlds import KINDS, WorldSpec, as_world

    n_eval = _own_n_eval(loaded, opts, n_eval)
    if opts.world.world is None and opts.data is None and loaded.world is not None:
        seed = seed if seed is not None else int(loaded.train.get("seed", 0))
    seed = seed or 0
    where, base_dir = where or placed(loaded, opts)
    if isinstance(where, WorldSpec):
        ev = KINDS.get(where.name).evaluation_set(where, n_eval, seed, opts.cache_dir,
                                                  opts.progress)
        if ev is not None:
            return where, ev, seed
    w = as_world(where, base_dir)
    return w.spec, w.eval_set(n_eval, seed), seed


def input_adapter(loaded: LoadedEncoder, x: Any, normalize: str | None) -> Any:
    """What embeds a world's inputs ``x`` with ``loaded``: vectors and an idaudit
    checkpoint's images (it records its own input format) go as they are; images (uint8
    N×H×W×3) reach any other encoder as float N×3×H×W in [0, 1], then ``normalize``
    (:func:`~idaudit.loading.image_input.parse_normalize`), by default the encoder's own (a
    Hugging Face directory's preprocessor_config.json), else none."""
    images = getattr(x, "dtype", None) == np.uint8 and getattr(x, "ndim", 0) == 4
    if normalize is not None and not images:
        raise IdauditError("--normalize applies to image worlds (reacher); this world's inputs "
                           "are vectors")
    if not images:
        return loaded.module
    if loaded.world is not None:
        if normalize is not None:
            raise IdauditError("--normalize does not apply to an idaudit checkpoint: it records "
                               "its own input format")
        return loaded.module
    from idaudit.loading.image_input import ImageAdapter, model_normalize, parse_normalize
    from idaudit.models.embedding_choice import ChosenEmbedding

    own = None
    if loaded.preprocessor is not None:
        try:
            own = model_normalize(loaded.preprocessor)
        except IdauditError:
            if normalize is None:  # given, --normalize is used whatever the file holds
                raise
    chosen = parse_normalize(normalize if normalize is not None else
                             own.normalize if own is not None else "none")
    if own is not None and not loaded.noted:
        note = own.note(normalize, chosen)
        if note:
            print(printable(f"note: {note}"), file=sys.stderr)
        loaded.noted = True
    module = loaded.module  # its way of being called (forward, or LeWM's encode) kept inside
    module = module if isinstance(module, ChosenEmbedding) else ChosenEmbedding(module)
    return ImageAdapter(module, chosen)


#: how many inputs an encoder is tried on before its evaluation set is made and embedded:
#: two, not one, so that a network that squeezes its batch axis (y.squeeze() after pooling
#: to 1 × 1) is not refused for a batch of one it will never be given
PROBE_ROWS = 2


def probe_input(loaded: LoadedEncoder, opts: EncoderOptions, where: Placed | None = None
                ) -> Any | None:
    """:data:`PROBE_ROWS` inputs shaped as the evaluation set ``loaded`` is embedded on,
    made without making that set (:meth:`~idaudit.worlds.kind.WorldKind.probe_input`: Reacher
    images, nothing rendered), or None where the set itself is cheap to make first
    (``where``: :func:`placed`, where the caller has it)."""
    from idaudit.worlds import KINDS, WorldSpec

    where, base_dir = where or placed(loaded, opts)
    if not isinstance(where, WorldSpec):
        return None
    return KINDS.get(where.name).probe_input(where, PROBE_ROWS, base_dir)


def planned_rows(loaded: LoadedEncoder, opts: EncoderOptions, n_eval: int | None = None,
                 where: Placed | None = None) -> tuple[int, int, Any] | None:
    """(rows, latent dim n, world spec) of the evaluation set :func:`eval_set_for` would make,
    known without making it (:meth:`~idaudit.worlds.kind.WorldKind.evaluation_rows`:
    ``--n-eval`` or the kind's default size), or None where only the set itself tells
    (``where``: :func:`placed`, where the caller has it)."""
    from idaudit.worlds import KINDS, WorldSpec

    n_eval = _own_n_eval(loaded, opts, n_eval)
    where, base_dir = where or placed(loaded, opts)
    if not isinstance(where, WorldSpec):
        return None
    rows = KINDS.get(where.name).evaluation_rows(where, n_eval, base_dir)
    return None if rows is None else (int(rows), int(where.dim), where)


def try_first(loaded: LoadedEncoder, x: Any, normalize: str | None, spec: Any = None) -> int:
    """Embed the first :data:`PROBE_ROWS` rows of ``x`` as the whole set will be embedded;
    return the embedding's width m. Every refusal that depends only on the options or on the
    shape or type of the output (``--pool`` for an output pooled already, tokens without
    ``--pool``, an ``--output`` the output lacks, an input size or ``--normalize`` the encoder
    does not take, an output that is not real numbers) then costs a forward pass of two
    inputs, not a full one after the set is rendered; so does too few rows for the width
    (:func:`tried_then_set`). An encoder whose own call fails is told, in the
    same line, how the inputs it was given may become what it takes: the world's dim (a vector
    world's ``spec``) and, unless it is called through one already, an embed function."""
    from idaudit.models.embedding_choice import ChosenEmbedding
    from idaudit.models.encoders import EncoderFailed
    from idaudit.models.encoders import embed as embed_batch

    few = x[:PROBE_ROWS]
    try:
        h = embed_batch(input_adapter(loaded, few, normalize), few)
    except EncoderFailed as exc:
        flags, library = [exc.flags_text], [exc.library_text]  # (command line, Python)
        dim = getattr(spec, "dim", None)
        if dim is not None and getattr(x, "ndim", 0) == 2:
            said = f"world {spec.name!r} gives {dim}-dimensional observations, one a row: "
            flags.append(said + "for another width give --dim N")
            library.append(said + "for another width give dim=N")
        if not (isinstance(loaded.module, ChosenEmbedding) and loaded.module.embed_fn is not None):
            said = "for inputs in another form (a stack of views, a dict) say how to call it "
            flags.append(said + "with --embed module:function, called as function(model, x) "
                         "→ (batch, m)")
            library.append(said + "with embed=, a function (model, x) → (batch, m)")
        if len(flags) == 1:
            raise
        raise IdauditError("; ".join(flags), library="; ".join(library)) from None
    return int(h.shape[1])


def _check_rows(rows: int, n: int, spec: Any, encoders: list[LoadedEncoder], widths: list[int],
                label_free: bool) -> None:
    """:class:`~idaudit.evaluations.inputs.TooFewRows` where ``rows`` evaluation rows of the
    world ``spec`` cannot support an audit of an encoder of its width (``widths``)."""
    for loaded, m in zip(encoders, widths):
        reason = rows_reason(rows, n, m, label_free)
        if reason is not None:
            exc = TooFewRows(reason, rows, n, m, str(loaded.path),
                             spec.to_dict() if hasattr(spec, "to_dict") else None)
            exc.encoder_id = id(loaded)
            raise exc


def tried_then_set(encoders: list[LoadedEncoder], opts: EncoderOptions,
                   n_eval: int | None = None, seed: int | None = None,
                   rows: str | None = None) -> tuple[Any, Any, int]:
    """:func:`eval_set_for` the first encoder, every encoder tried on a few inputs first
    (:func:`try_first`: on the kind's probe input before the set is made, else on the set's
    first rows before any encoder is embedded on it). ``rows`` (``"audit"``, ``"label_free"``
    or None: no check): the set's rows checked against each encoder's width
    (:func:`~idaudit.evaluations.inputs.rows_reason`) as soon as both are known — right after
    the probe where the kind knows the set's size without making it
    (:func:`planned_rows`), else right after the set is made, before any of it is embedded —,
    raising :class:`~idaudit.evaluations.inputs.TooFewRows`."""
    where = placed(encoders[0], opts)  # made once: probe, planned rows and set share it
    probe = probe_input(encoders[0], opts, where)
    widths = [try_first(loaded, probe, opts.normalize) for loaded in encoders] \
        if probe is not None else []
    planned = planned_rows(encoders[0], opts, n_eval, where) if rows and widths else None
    if planned is not None:
        _check_rows(*planned, encoders, widths, rows == "label_free")
    spec, ev, seed = eval_set_for(encoders[0], opts, n_eval, seed, where)
    if probe is None:
        widths = [try_first(loaded, ev.x, opts.normalize, spec) for loaded in encoders]
    if rows:
        _check_rows(len(ev.x), int(ev.z.shape[1]), spec, encoders, widths, rows == "label_free")
    return spec, ev, seed


def try_encoders(encoders: list[LoadedEncoder], opts: EncoderOptions, n_eval: int | None = None,
                 rows: str | None = None) -> None:
    """Each encoder tried on its probe input (:func:`probe_input`) before any is embedded:
    with several targets, a refusal for the last comes before the first is embedded; so does
    too few rows for its width (``rows``, as for :func:`tried_then_set`), where its kind
    knows the set's size without making it."""
    for loaded in encoders:
        where = placed(loaded, opts)
        probe = probe_input(loaded, opts, where)
        if probe is not None:
            width = try_first(loaded, probe, opts.normalize)
            planned = planned_rows(loaded, opts, n_eval, where) if rows else None
            if planned is not None:
                _check_rows(*planned, [loaded], [width], rows == "label_free")


def inputs_for_encoder(loaded: LoadedEncoder, opts: EncoderOptions, n_eval: int | None = None,
                       seed: int | None = None, rows: str | None = None) -> AuditInputs:
    """Embed the world's evaluation set (for a checkpoint on its own world: the set its
    training used, same size and seed) and its positive partners where it has them, the
    encoder tried on a few inputs first (:func:`tried_then_set`, which checks the set's
    ``rows`` against the encoder's width first where asked)."""
    from idaudit.models.encoders import embed as embed_batch

    spec, ev, seed = tried_then_set([loaded], opts, n_eval, seed, rows)
    module = input_adapter(loaded, ev.x, opts.normalize)
    h = embed_batch(module, ev.x)
    hp = embed_batch(module, ev.x_prime) if ev.x_prime is not None and ev.rho is not None else None
    arrays = {k: None if v is None else to_numpy(v) for k, v in
              (("z", ev.z), ("h", h), ("h_prime", hp), ("x", ev.baseline),
               ("test_rows", ev.test_rows))}
    frames, frame_rows = frame_sample(ev.x, arrays["test_rows"])
    return AuditInputs(**arrays, rho=ev.rho, circular=ev.circular, angle_sigma=ev.angle_sigma,
                       z_white=ev.z_white,
                       source=str(loaded.path), world=spec.to_dict(), seed=seed,
                       frames=frames, frame_rows=frame_rows)


def files_read(targets: list[Any], options: dict[str, Any] | EncoderOptions,
               gate: Any = None, name: str = "the input") -> list[tuple[Path, str]]:
    """Every file and directory an evaluation of ``targets`` reads (or fills), with what it
    is (``name``: what the targets are called): the targets; the modules ``--arch`` and
    ``--embed`` import; ``--cache-dir``; the data they are embedded on — ``--data``, else
    the files of ``--world`` (Reacher's evaluation cache), else what each checkpoint
    remembers (its pairs file or dataset, found relative to it as its loader finds it) —; the
    ``gate`` file. ``options``: the encoder options (:class:`EncoderOptions`, or flat as the
    CLI's flags name them). Known before any output is touched; nothing here raises for bad
    input (the evaluation then refuses it, before reading any of these)."""
    from idaudit.core.metadata import is_checkpoint
    from idaudit.loading.architectures import module_files

    opts = flat_options(options) if isinstance(options, EncoderOptions) else options
    paths = [t for t in targets if isinstance(t, (str, os.PathLike))]
    files = [(Path(t), name) for t in paths]
    for flag in ("arch", "embed"):
        named = opts.get(flag)
        for spec in named.values() if isinstance(named, dict) else [named]:
            if isinstance(spec, str):  # a function of this process imports nothing
                files += [(p, f"the module --{flag} imports") for p in module_files(spec)]
    world, data, cache_dir = opts.get("world"), opts.get("data"), opts.get("cache_dir")
    if cache_dir is not None:
        files.append((Path(cache_dir), "--cache-dir"))
    if data is not None:
        files.append((Path(data), "--data"))
    elif world is not None:
        from idaudit.worlds import KINDS, World, WorldSpec, make_spec

        choice = WorldChoice(**{f.name: opts.get(f.name) for f in fields(WorldChoice)})
        try:
            spec = world.spec if isinstance(world, World) else world \
                if isinstance(world, WorldSpec) else make_spec(world, **choice.world_options())
            files += [(p, f"what world {spec.name!r} reads")
                      for p in KINDS.get(spec.name).files(spec, cache_dir=cache_dir)]
        except (ValueError, TypeError):  # refused by the evaluation (IdauditError is a ValueError)
            pass
    else:
        for t in paths:
            if not is_checkpoint(t):  # arrays, other projects' files: no world (and no torch)
                continue
            from idaudit.models.checkpoint import checkpoint_world
            from idaudit.worlds import KINDS

            spec = checkpoint_world(t)
            if spec is not None and spec.name in KINDS:
                files += [(p, f"the data {t} was trained on") for p in
                          KINDS.get(spec.name).files(spec, Path(t).parent, cache_dir=cache_dir)]
    if isinstance(gate, (str, os.PathLike)):
        files.append((Path(gate), "--gate"))
    return files


def check_embed_outputs(target: Any, out: str | Path | None,
                        options: dict[str, Any] | EncoderOptions) -> Path | None:
    """``embed --out`` checked before any work: an ``.npz`` (:func:`check_embed_out`), none of
    the files :func:`files_read` names, writable; a stale file there removed. ``options``:
    the encoder options, as for :func:`files_read`."""
    path = check_embed_out(out)  # before check_outputs removes a stale file there
    check_outputs([(path, "--out")], files_read([target], options, name="the target"),
                  remove_stale=True)
    return path


def check_embed_out(out: str | Path | None) -> Path | None:
    """``embed --out`` must name an .npz file; checked before anything at that path is
    touched (a stale output is removed only after this)."""
    if out is None:
        return None
    if Path(out).suffix.lower() != ".npz":
        raise IdauditError(f"--out must name an .npz file, got {out}")
    return Path(out)


def run_embed(req: EmbedRequest) -> AuditInputs:
    """The embeddings of :class:`~idaudit.core.requests.EmbedRequest` ``req``: its encoder on its
    evaluation set (as an audit would embed it), written to ``req.out`` as ``.npz`` when given
    (z, h, and h_prime with rho where there are pairs; x, the raw-mixing baseline, on vector
    worlds; circular; test_rows where the world fixes the held-out rows; the seed of the
    split), atomically, so that auditing the file gives the audit's numbers. Returns the
    arrays."""
    from idaudit.core.atomic import atomic_write

    check_seed(req.seed)
    out = check_embed_outputs(req.target, req.out, req.encoder)
    if req.target is None:
        raise IdauditError("embed needs an encoder")
    check_embedding_options(req.n_eval, req.encoder.normalize)
    held = f"{req.target} holds arrays already: audit it as it is"
    loaded = open_target(req.target, req.encoder.load, arrays_refused=held)
    if isinstance(loaded, Arrays):
        raise IdauditError(held)
    inp = inputs_for_encoder(loaded, req.encoder, req.n_eval, req.seed)
    if out is not None:
        arrays = {k: v for k, v in (("z", inp.z), ("h", inp.h), ("h_prime", inp.h_prime),
                                    ("x", inp.x), ("test_rows", inp.test_rows)) if v is not None}
        if inp.rho is not None and inp.h_prime is not None:
            arrays["rho"] = np.float64(inp.rho)
        arrays["circular"] = np.asarray(inp.circular or (), dtype=np.int64)
        if inp.angle_sigma is not None:  # the angles' law, for the ceiling
            arrays["angle_sigma"] = np.float64(inp.angle_sigma)
        arrays["seed"] = np.int64(inp.seed or 0)  # the audit's split and seed, reproduced
        if inp.z_white:  # z's law is white: the audit of these arrays uses z as it is
            arrays["z_white"] = np.int64(1)
        atomic_write(out, lambda tmp: np.savez(tmp, **arrays))
    return inp


def embed(target: Any = None, **options: Any) -> AuditInputs:
    """Embed a world's evaluation set with an encoder as ``idaudit embed`` does: ``target``
    any encoder form audit takes (a path, or an ``nn.Module``/callable), with the command's
    options as keywords (see :class:`~idaudit.core.requests.EmbedRequest`: ``world``,
    ``data``, ``n_eval``, ``seed``, the load options; ``out`` writes the ``.npz``, optional
    here); returns the arrays (z, h, h_prime, rho …) an audit would measure.
    ``embed(EmbedRequest(...))`` embeds a request as it is (:func:`run_embed`), with no other
    argument."""
    if isinstance(target, EmbedRequest):
        if options:
            raise IdauditError("give an EmbedRequest alone, or options, not both")
        return run_embed(target)
    unknown_options(EmbedRequest, options, "embed", positional=("target",))
    return run_embed(EmbedRequest.from_options(target=target, **options))
