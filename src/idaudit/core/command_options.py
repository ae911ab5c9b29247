"""Each command's own options, declared once as :class:`~idaudit.core.options.Option` (name,
type, flags, help, default, constraint), and every group of options with the commands that
take it (:data:`GROUPS`, docs/options.md's sections).

A command's own options are those it passes to its request besides the shared groups of
:mod:`idaudit.core.options` (world, train and encoder options): audit's (:data:`AUDIT`, its
gate thresholds :data:`GATE`), consistency's, plan's, embed's, world's (:data:`WRITE`) and
sweep's. Their typer parameters are made from them (``cli/options.py``: ``option_flags``), and
the requests' own fields read their defaults from them (:func:`~idaudit.core.options.by_name`).

Example:
    >>> pairs = PLAN[0]
    >>> pairs.flag, pairs.default, pairs.invalids()
    ('--pairs', 100, (0,))
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from idaudit.core.defaults import FLOOR_DRAWS, TEST_FRACTION, WORLD_DEFAULTS
from idaudit.core.defaults import default_text as _text
from idaudit.core.options import ENCODER, TRAIN, WORLD, Option


def _world(key: str) -> str:
    return _text(WORLD_DEFAULTS[key])


# A command's own option defaults here (``default``), and its request's field reads it
# (idaudit.core.requests); None: "not given" (the command chooses, as its help says).


def _n_eval(what: str, whose: str = "the training") -> Option:
    """``--n-eval`` of a command that embeds a world's evaluation set: ``what`` it counts,
    and whose evaluation set is the default."""
    return Option("n_eval", "integer", f"{what} (default: {whose} eval set, else "
                  f"{_world('n_eval')}; reacher without --data: "
                  f"{_world('rendered_eval_pairs')} rendered pairs)", limit="n_eval")


def _output(name: str, help: str, flags: tuple[str, ...] = (), default: Any = None) -> Option:
    """A file a command writes: no readable check (click's would race with another process
    replacing the same file, seen as "Path … is not readable", exit 2)."""
    return Option(name, "path", help, flags, typer={"readable": False}, default=default)


#: the gate thresholds with a flag of their own (audit's words; consistency names its keys)
GATE: tuple[Option, ...] = (
    Option("min_r2", "number", "gate: held-out R²(h → z) ≥"),
    Option("max_orthogonality_error", "number", "gate: orthogonality error ≤"),
)
_G = {o.name: o for o in GATE}

#: ``idaudit audit``'s own options (with the encoder flags, ENCODER, and a report's)
AUDIT: tuple[Option, ...] = (
    Option("reduce", "string", "with several targets, gate the worst run's value of each "
           "gated metric, or the median", choices=("worst", "median"), default="worst"),
    _n_eval("evaluation pairs"),
    Option("seed", "integer", "eval-set and split seed (default: a checkpoint's training "
           "seed, else 0)"),
    Option("bootstrap", "integer", "bootstrap resamples for CIs", limit="bootstrap", default=0),
    Option("test_fraction", "number", f"held-out share of rows (default {TEST_FRACTION:g}; "
           "not where a world fixes its evaluation images, as Reacher does)",
           limit="test_fraction"),
    Option("circular", "string", "comma-separated latent indices that are angles"),
    Option("angle_sigma", "number", "with --circular on arrays: the angles are drawn N(0, σ²) "
           "and seen mod 2π, so the audit reports the ceiling of R²(h → z) (a world that knows "
           "its law, as reacher, says it itself)", limit="angle_sigma"),
    Option("gauss_sims", "integer", "Gaussianity p-value: 0 from the asymptotic null law; N > "
           "0 from N simulated Gaussian data sets of the same size (exact, p ≥ 1/(N+1))",
           limit="gauss_sims", default=0),
    Option("floor_draws", "integer", "shuffles of z against h behind the band an "
           "uninformative encoder of this width reaches on these rows (default "
           f"{FLOOR_DRAWS}; 0: none)", limit="floor_draws"),
    *GATE,
    Option("label_free", "flag", "ignore the true latents z: the verdict a project without "
           "them would get (arrays without z are audited label-free anyway)", default=False),
    _output("plot", "write the audit's figures as one PNG (the plot extra)"),
    _output("html", "write one self-contained page: verdict, gates, figures, every metric "
            "with its meaning (the plot extra)"),
)

#: ``idaudit consistency``'s own options
CONSISTENCY: tuple[Option, ...] = (
    _n_eval("inputs to embed", "the first checkpoint's"),
    Option("seed", "integer", "inputs and split seed (default: the first checkpoint's "
           "training seed, else 0)"),
    Option("test_fraction", "number", "held-out share of rows", limit="test_fraction",
           default=TEST_FRACTION),
    replace(_G["min_r2"], help="gate: consistency_r2 (worst pair, held-out) ≥"),
    replace(_G["max_orthogonality_error"], help="gate: consistency_orthogonality_error ≤"),
)

#: ``idaudit plan``'s own options (its --json and --plot only render)
PLAN: tuple[Option, ...] = (
    Option("pairs", "integer", "random start/goal pairs", limit="pairs", default=100),  # no -k: --k is k
    Option("waypoints", "integer", "segments per plan", limit="waypoints", default=20),
    Option("gallery", "integer", "k-NN decoder gallery size (synthetic worlds; default "
           f"{_world('gallery')})", limit="gallery"),
    Option("k", "integer", "neighbours the k-NN decoder averages, from the gallery's latents "
           "to the world's", limit="k", default=5),
    Option("seed", "integer", "seed of the start/goal pairs (and the gallery)", default=0),
)

#: ``idaudit embed``'s own options
EMBED: tuple[Option, ...] = (
    _output("out", "the .npz to write: z, h; h_prime and rho where the world has pairs; x on "
            "vector worlds (the raw-mixing baseline); circular (with angle_sigma, the angles' "
            "law, where the world knows it); the split's seed, and test_rows where the world "
            "fixes its held-out rows", flags=("--out", "-o"), default=...),
    _n_eval("inputs to embed"),
    Option("seed", "integer", "evaluation-set seed (default: a checkpoint's training seed, "
           "else 0)"),
)

#: ``idaudit world``'s own options (with the world options, WORLD)
WRITE: tuple[Option, ...] = (
    Option("pairs", "integer", "number of (z, z′) pairs", limit="pairs", default=10_000),
    Option("seed", "integer", "the dataset's seed", default=0),
    _output("out", "output file (.safetensors), or a directory for reacher",
            flags=("--out", "-o"), default=...),
    Option("n_eval", "integer", f"reacher: shared evaluation images (default "
           f"{_world('n_eval')})", limit="n_eval"),
)

#: ``idaudit sweep``'s own options (its --list only prints)
SWEEP: tuple[Option, ...] = (
    Option("out", "directory", "results directory, or a URI (s3://bucket/prefix: the s3 "
           "extra)", ("--out", "-o"), default="sweeps"),
    Option("seeds", "integer", "keep the first N seeds", limit="seeds"),
    Option("steps", "integer", "cap the training steps", limit="steps"),
    Option("dims", "string", "comma-separated dims to keep"),
    Option("objectives", "string", "comma-separated objectives to keep"),
    Option("only", "list", "keep runs whose option is one of the values, e.g. --only "
           "world=spiral --only lamb=1e-3,5e-3; a run without that option is kept (--only "
           "rho=0.9 keeps the trajectory runs too: add --only mode=ou)", default=()),
    Option("set", "list", "override an option on every run, e.g. --set pairs=3000 --set "
           "epochs=10 (Reacher)", default=()),
    Option("workers", "integer", "parallel runs (default: cores, or one per GPU; under Ray: "
           "the most runs in flight, default all)", limit="sweep_workers"),
    Option("executor", "string", "local (process pool) | ray", choices=("local", "ray"),
           default="local"),
    Option("address", "string", "Ray cluster address (default: RAY_ADDRESS, else the cluster "
           "the last `ray start` here started, else a local Ray instance)"),
    Option("runtime_env", "path", "Ray: a runtime environment for every task, a JSON or YAML "
           "file of Ray's keys (py_modules, pip, env_vars, working_dir …), e.g. to bring "
           "idaudit to nodes without it"),
    Option("cpus_per_run", "number", "Ray: CPUs each run asks for (torch threads, render "
           "processes; default 1)", limit="per_run"),
    Option("gpus_per_run", "number", "Ray: GPUs each run asks for (default 0; > 0 trains the "
           "GPU recipe on CUDA)", limit="per_run"),
    Option("memory_per_run", "number", "Ray: memory each run declares, GiB (default: none)",
           limit="per_run"),
    Option("checkpoints", "flag", "keep each trained encoder as OUT/checkpoints/ID.safetensors "
           "(for audit and plan)", default=False),
)

#: each group with the commands that take it, in docs/options.md's order: a title → (the
#: commands, the options); tests/test_options.py reads it
GROUPS: dict[str, tuple[tuple[str, ...], tuple[Option, ...]]] = {
    "World options": (("train", "world"), WORLD),
    "Train options": (("train",), TRAIN),
    "Encoder options": (("audit", "consistency", "plan", "embed"), ENCODER),
    "Audit options": (("audit",), AUDIT),
    "Consistency options": (("consistency",), CONSISTENCY),
    "Plan options": (("plan",), PLAN),
    "Embed options": (("embed",), EMBED),
    "World file options": (("world",), WRITE),
    "Sweep options": (("sweep",), SWEEP),
}

#: the groups whose default is resolved through a chain (a world's own, a recipe's, then the
#: global one of idaudit.core.defaults): their ``default`` is None, "not given"
CHAINED = ("World options", "Train options", "Encoder options")


__all__ = ["AUDIT", "CHAINED", "CONSISTENCY", "EMBED", "GATE", "GROUPS", "PLAN", "SWEEP", "WRITE"]
