"""The ``idaudit`` command: a thin typer layer over the library."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from ._version import __version__
from .defaults import (
    OFFICIAL_LAMB,
    TEST_FRACTION,
    TRAIN_DEFAULTS,
    WORLD,
    WORLD_DEFAULTS,
    default_text,
)
from .errors import (
    EXIT_INTERNAL,
    EXIT_RUNS_FAILED,
    IdauditError,
    check_seed,
    internal_error_line,
    printable,
    show_tracebacks,
)
from .io import check_outputs, json_text
from .requests import (
    AuditRequest,
    ConsistencyRequest,
    PlanRequest,
    SweepRequest,
    WorldRequest,
    default,
)

app = typer.Typer(
    help="Did your self-supervised encoder learn the world? Worlds with known latents, "
         "LeJEPA/VICReg/InfoNCE training, identifiability audits and latent planning.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
out = Console()
err = Console(stderr=True)


def to_stdout(path: Path | None) -> bool:
    """``-`` for a report path means standard output (the table then goes to stderr)."""
    return path is not None and str(path) == "-"


def _report_outputs(named: list[tuple[Path | None, str]]) -> list[tuple[Path | None, str]]:
    """The report paths to check as files: ``-`` (stdout) left out, and at most one of them."""
    dashes = [flag for path, flag in named if to_stdout(path)]
    if len(dashes) > 1:
        raise IdauditError(f"{' and '.join(dashes)} both name standard output (-); give one "
                           "of them a file")
    return [(path, flag) for path, flag in named if not to_stdout(path)]


def _emit(path: Path, text: str) -> None:
    """Write a report's ``text`` to ``path`` atomically, or to stdout for ``-``."""
    from .io import atomic_write

    if to_stdout(path):
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    else:
        atomic_write(path, lambda tmp: Path(tmp).write_text(text))


# Exceptions the command layer hands on to typer as they are: exits, aborts and usage errors.
# typer ≥ 0.28 carries its own copy of click (typer._click) and older ones use click itself;
# both raise their usage errors as subclasses of a ClickException that typer.BadParameter
# derives from, so it is found there rather than imported from a package we do not depend on.
_PASS_THROUGH = (typer.Exit, typer.Abort,
                 *(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"))


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush cannot fail again."""
    import os
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def cli_errors(fn):
    """Turn IdauditError into one line on stderr and its exit code; anything else that escapes
    is a bug in idaudit: one line and exit 5 (``IDAUDIT_TRACEBACK=1`` shows where), so that a
    crash never reads as a verdict (exit 1 is a failed gate and nothing else)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except IdauditError as exc:
            err.print(f"[red]error:[/red] {escape(printable(str(exc)))}", highlight=False,
                      soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # `idaudit … | head`: the reader left; not a bug, not a verdict
            _quiet_stdout()
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        except _PASS_THROUGH:
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            if show_tracebacks():
                raise
            err.print(escape(internal_error_line(exc)), highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper


# ---- shared options --------------------------------------------------------------------
# World options default to None ("not given"): each world fills its own defaults and refuses
# the options it does not take, naming them. Help texts read the defaults from
# idaudit.defaults (chained options) and the request dataclasses (a command's own options).


def _d(key: str) -> str:
    """A world option's default as its help text shows it."""
    return default_text(WORLD_DEFAULTS[key])


WorldOpt = typer.Option(None, "--world", "-w",
                        help="spiral | banana | sinusoid | nvp (2D RealNVP coupling) | coupling "
                             f"(any even --dim) | reacher (MuJoCo pixels) (default: {WORLD}, or "
                             "the world of --data)")
DimOpt = typer.Option(None, "--dim", "-n", help="latent dimension (coupling: any even N; 2D "
                      "worlds: 2)")
SourceOpt = typer.Option(None, "--source", help="latent law: gaussian | laplace | gennorm "
                         f"(default {_d('source')})")
AlphaOpt = typer.Option(None, "--alpha", help="shape α of the gennorm source (2 = Gaussian, "
                        "1 = Laplace)")
RhoOpt = typer.Option(None, "--rho", help="OU correlation ρ in (0, 1): z′ = ρz + √(1−ρ²)η "
                      f"(default {_d('rho')})")
LayersOpt = typer.Option(None, "--layers", help=f"coupling layers (default {_d('layers')}; the "
                         "encoder matches)")
TrajectoryOpt = typer.Option(None, "--trajectory/--ou", help="reacher: pairs from episodes of "
                             "a goal-reaching controller instead of OU pairs", show_default=False)
StrideOpt = typer.Option(None, "--stride", help="reacher --trajectory: steps between views "
                         f"(default {_d('stride')})")
DataSeedOpt = typer.Option(None, "--data-seed", help="reacher: the dataset's seed (default "
                           f"{_d('data_seed')}; separate from the training --seed)")
ImageSizeOpt = typer.Option(None, "--image-size", help="reacher: image side in pixels, "
                           f"rendered at that size (default {_d('image_size')}, the paper's)")
WorkersOpt = typer.Option(None, "--workers", help="reacher: render processes (default: one "
                          "per core)")


def say(message: str) -> None:
    err.print(escape(message), soft_wrap=True, highlight=False)


def _print_version(value: bool) -> None:
    if value:
        out.print(f"idaudit {__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", callback=_print_version,
                                 is_eager=True, help="print idaudit's version and exit"),
) -> None:
    """Did your self-supervised encoder learn the world? Worlds with known latents,
    LeJEPA/VICReg/InfoNCE training, identifiability audits and latent planning."""


# ---- commands --------------------------------------------------------------------------


@app.command()
@cli_errors
def world(
    name: str | None = typer.Argument(None, help="world name (same as --world)"),
    world_: str | None = WorldOpt,
    dim: int | None = DimOpt,
    source: str | None = SourceOpt,
    alpha: float | None = AlphaOpt,
    rho: float | None = RhoOpt,
    layers: int | None = LayersOpt,
    pairs: int = typer.Option(default(WorldRequest, "pairs"), "--pairs",
                              help="number of (z, z′) pairs"),
    seed: int = typer.Option(default(WorldRequest, "seed"), "--seed", help="the dataset's seed"),
    out_path: Path = typer.Option(..., "--out", "-o", help="output file (.safetensors), or "
                                  "a directory for reacher"),
    trajectory: bool | None = TrajectoryOpt,
    stride: int | None = StrideOpt,
    n_eval: int | None = typer.Option(None, "--n-eval", help="reacher: shared evaluation "
                                      f"images (default {_d('n_eval')})"),
    image_size: int | None = ImageSizeOpt,
    workers: int | None = WorkersOpt,
) -> None:
    """Write n positive pairs (z, z′, x, x′) of a world, its spec in the file's metadata.

    `idaudit world reacher --rho 0.95 --pairs N --out DIR` renders MuJoCo Reacher images
    (resumable: rerun the same command after an interruption).
    """
    from . import datasets

    out.print(datasets.world(
        name, progress=True, world=world_, dim=dim, source=source, alpha=alpha, rho=rho,
        layers=layers, trajectory=trajectory, stride=stride, n_eval=n_eval,
        image_size=image_size, out=out_path, pairs=pairs, seed=seed, workers=workers))


@app.command()
@cli_errors
def train(
    world_: str | None = WorldOpt,
    dim: int | None = DimOpt,
    source: str | None = SourceOpt,
    alpha: float | None = AlphaOpt,
    rho: float | None = RhoOpt,
    layers: int | None = LayersOpt,
    objective: str | None = typer.Option(None, "--objective", "-O",
                                         help="lejepa (SIGReg + alignment) | whiten "
                                              "(VICReg-style) | infonce"),
    lamb: float | None = typer.Option(None, "--lamb", help="regulariser weight λ in [0, 1]"),
    sigma: str | None = typer.Option(None, "--sigma", help="InfoNCE kernel width σ; "
                                     "'auto' = √((1−ρ_v²)/ρ_v), matched to the views' OU "
                                     "channel; 'sqrtn' = √(N/2)"),
    steps: int | None = typer.Option(None, "--steps", help="training steps on synthetic worlds"),
    epochs: int | None = typer.Option(None, "--epochs", help="epochs over the pairs on dataset "
                                      "worlds (reacher, --data)"),
    batch: int | None = typer.Option(None, "--batch", help="pairs per step (two views each)"),
    lr: float | None = typer.Option(None, "--lr", help="peak learning rate"),
    seed: int | None = typer.Option(None, "--seed", help="training seed (initialisation, "
                                    "batches, the evaluation set of synthetic worlds)"),
    inits: int | None = typer.Option(None, "--inits", help="train K encoders, keep the lowest "
                                     "final loss"),
    eval_every: int | None = typer.Option(None, "--eval-every", help="steps between curve "
                                          "points (0: only at the end)"),
    n_eval: int | None = typer.Option(None, "--n-eval", help="size of the fixed evaluation set "
                                      "(reacher: of the rendered evaluation images)"),
    views: str | None = typer.Option(None, "--views",
                                     help="anchor: both views one OU step from a shared z (the "
                                          "paper's code; views correlate ρ²) | pair: views "
                                          "(z, z′) (dataset worlds: pair only)"),
    form: str | None = typer.Option(None, "--form", help="lejepa: paper (λ·SIGReg of both "
                                    "views pooled + (1 − λ)·alignment) | official (the lejepa "
                                    "library's: alignment + λ·SIGReg per view, λ default "
                                    f"{default_text(OFFICIAL_LAMB)}) (default "
                                    f"{TRAIN_DEFAULTS['form']})"),
    n_views: int | None = typer.Option(None, "--n-views", help="views per row, each one OU "
                                       "step from a shared anchor (above 2: --views anchor, "
                                       f"synthetic worlds) (default {TRAIN_DEFAULTS['n_views']})"),
    projector: str | None = typer.Option(None, "--projector", help="widths of a projector "
                                         "head, e.g. 256,256,2 (Linear-BN-ReLU, last Linear); "
                                         "the objective sees its output, audit and plan the "
                                         "backbone's unless --output projector"),
    encoder: str | None = typer.Option(None, "--encoder",
                                       help="mlp | coupling | cnn | pixel_cnn (default: the "
                                            "world's)"),
    encoder_kwargs: str | None = typer.Option(None, "--encoder-kwargs", help="JSON object"),
    device: str | None = typer.Option(None, "--device", help="auto (CUDA when present) | cpu "
                                      "| cuda; it chooses the reacher recipe"),
    out_path: Path | None = typer.Option(None, "--out", "-o",
                                         help="checkpoint path (.safetensors)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    pairs: int | None = typer.Option(None, "--pairs", help="reacher: rendered training pairs"),
    trajectory: bool | None = TrajectoryOpt,
    stride: int | None = StrideOpt,
    data_seed: int | None = DataSeedOpt,
    image_size: int | None = ImageSizeOpt,
    recipe: str | None = typer.Option(None, "--recipe", help="reacher: cpu (chosen on a CPU: "
                                      "small images, a lighter CNN, a run of minutes) | paper "
                                      "(chosen on CUDA); options given explicitly win"),
    data: Path | None = typer.Option(None, "--data", help="train on stored pairs: a file from "
                                     "`idaudit world`, or a Reacher dataset directory "
                                     "(rendered there if missing)"),
    workers: int | None = WorkersOpt,
    show_config: bool = typer.Option(False, "--show-config", help="print every resolved "
                                     "option with where its value comes from (given, recipe, "
                                     "world, default) and exit: nothing is trained, rendered "
                                     "or written"),
) -> None:
    """Train an encoder on a world; write a self-describing checkpoint and a JSON log.

    Every objective trains on every world. `--world reacher` renders (or reuses) a MuJoCo
    dataset and trains a CNN over epochs, following a recipe: without CUDA the CPU recipe
    (announced in one line), on CUDA the paper's (64×64, 100 000 pairs, 100 epochs); any
    option given explicitly wins. Options that do not apply to the world are refused.
    Defaults left unsaid here: `--show-config` prints each one and its source.
    """
    from .loaders import parse_json_object
    from .report import metrics_table
    from .runs import TrainRequest, default_checkpoint_path, resolve_request, run_train

    req = TrainRequest(
        world=world_, dim=dim, source=source, alpha=alpha, rho=rho, layers=layers,
        objective=objective, lamb=lamb, sigma=sigma, steps=steps, epochs=epochs, batch=batch,
        lr=lr, seed=seed, inits=inits, eval_every=eval_every, n_eval=n_eval, views=views,
        form=form, n_views=n_views, projector=projector, encoder=encoder,
        encoder_kwargs=parse_json_object(encoder_kwargs, "--encoder-kwargs"),
        device=device, pairs=pairs, trajectory=trajectory, stride=stride, data_seed=data_seed,
        image_size=image_size, recipe=recipe, data=data, out=out_path, workers=workers)
    resolved = resolve_request(req)  # the device it trains on chooses the recipe
    if show_config:
        for line in resolved.config_lines():
            typer.echo(line)
        return
    if req.out is None:
        req.out = default_checkpoint_path(resolved)
    record = run_train(req, resolved, progress=not quiet, say=None if quiet else say)
    objective, seed = resolved.train.objective, resolved.train.seed
    out.print(metrics_table(record.metrics,
                            title=f"{record.world['name']} · {objective} · seed {seed}"))
    out.print(f"{record.steps_per_second:.0f} steps/s on {record.device}; "
              f"checkpoint {record.checkpoint}; log {record.log}")


ENCODER_FORMS = ("an idaudit checkpoint; weights (.safetensors, or a torch.save .pt/.pth/"
                 ".pth.tar/.ckpt read with weights_only) with --arch; a Hugging Face or LeWM "
                 "model directory; TorchScript; torch.export .pt2; or arrays holding z, h "
                 "[, h_prime, rho] (.npz, .safetensors, a torch.save dict)")
EncoderArg = typer.Argument(..., help=ENCODER_FORMS)
ArchOpt = typer.Option(None, "--arch", help="the network plain weights belong to: "
                       "module.path:factory (searched in installed packages, then the working "
                       "directory) or timm:NAME (timm.create_model, no download)")
ArchKwargsOpt = typer.Option(None, "--arch-kwargs", help="JSON kwargs for the factory")
TrustOpt = typer.Option(False, "--trust-pickle", help="unpickle a whole module or an object "
                        "of your own class, and a .pt2 archive idaudit cannot vet as code-free "
                        "(pickled weights, AOTInductor code, another torch than 2.13): runs "
                        "arbitrary code from the file")
KeyOpt = typer.Option(None, "--key", help="the entry of a torch.save dict holding the weights, "
                      "dots nesting (state_dict, target_encoder); asked for when it holds "
                      "several")
PrefixOpt = typer.Option(None, "--prefix", help="keep the weights under this prefix and strip "
                         "it (model.backbone.); module. and _orig_mod. are stripped always")
PoolOpt = typer.Option(None, "--pool", help="token outputs (batch, tokens, dim): cls (the first "
                       "token) | mean | none (all, flattened)")
OutputOpt = typer.Option(None, "--output", help="the field of a model output or dict "
                         "(last_hidden_state, pooler_output, emb), or an index of a tuple; "
                         "an idaudit checkpoint trained with --projector: backbone (default) "
                         "| projector")
EmbedOpt = typer.Option(None, "--embed", help="module:function called as function(model, "
                        "images) → (batch, m), for encoders with no plain forward")
NormalizeOpt = typer.Option(None, "--normalize", help="images for an encoder that is not an "
                            "idaudit checkpoint: float N×3×S×S in [0, 1], then imagenet | none "
                            "| MEAN,STD (default none)")
EvalImageSizeOpt = typer.Option(None, "--image-size", help="reacher: render the evaluation "
                                "images at S × S (e.g. 224 for a ViT; without --data the "
                                "--n-eval pairs are rendered and cached)")
CacheDirOpt = typer.Option(None, "--cache-dir", help="where rendered evaluation images are "
                           "cached (default $IDAUDIT_CACHE, else ~/.cache/idaudit)")
EvalWorldOpt = typer.Option(None, "--world", "-w", help="evaluate on this world (default: the "
                            "checkpoint's)")
DataOpt = typer.Option(None, "--data", help="evaluate on stored data: a pairs file from "
                       "`idaudit world` or a Reacher dataset directory")


KeysOpt = typer.Option(False, "--keys", help="show each metric's key (what --min, --max and "
                       "gate files name) beside its label")


#: the flags of every command that embeds encoders (audit, consistency, plan, embed): the
#: fields of EncoderOptions, each declared once here — (name, annotation, typer option)
ENCODER_FLAGS = (
    ("arch", "str | None", ArchOpt), ("arch_kwargs", "str | None", ArchKwargsOpt),
    ("trust_pickle", "bool", TrustOpt), ("key", "str | None", KeyOpt),
    ("prefix", "str | None", PrefixOpt), ("pool", "str | None", PoolOpt),
    ("output", "str | None", OutputOpt), ("embed", "str | None", EmbedOpt),
    ("world", "str | None", EvalWorldOpt), ("dim", "int | None", DimOpt),
    ("source", "str | None", SourceOpt), ("alpha", "float | None", AlphaOpt),
    ("rho", "float | None", RhoOpt), ("layers", "int | None", LayersOpt),
    ("image_size", "int | None", EvalImageSizeOpt), ("data", "Path | None", DataOpt),
    ("normalize", "str | None", NormalizeOpt), ("cache_dir", "Path | None", CacheDirOpt),
)


def flag_group(param: str, flags: tuple, prepare=None):
    """A decorator giving a command the ``flags`` — (name, annotation, typer option) triples,
    declared once for every command that takes them — in place of its parameter ``param``,
    which receives them as one dict (passed through ``prepare`` when given)."""
    import inspect

    def decorate(fn):
        sig = inspect.signature(fn)
        group = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                   default=option, annotation=annotation)
                 for name, annotation, option in flags]
        params = []
        for p in sig.parameters.values():
            params += group if p.name == param else [p]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            given = {name: kwargs.pop(name) for name, _, _ in flags}
            return fn(*args, **{param: prepare(given) if prepare else given}, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=params)
        wrapper.__annotations__ = {**{k: v for k, v in fn.__annotations__.items() if k != param},
                                   **{name: annotation for name, annotation, _ in flags}}
        return wrapper

    return decorate


def _encoder_fields(given: dict) -> dict:
    """The EncoderOptions fields of the encoder flags: ``--arch-kwargs`` parsed, a progress
    bar while evaluation images render."""
    from .jsontext import parse_json_object

    return {**given, "arch_kwargs": parse_json_object(given["arch_kwargs"], "--arch-kwargs"),
            "progress": True}


#: give a command the ENCODER_FLAGS as one dict ``encoder`` of EncoderOptions fields
encoder_flags = flag_group("encoder", ENCODER_FLAGS, _encoder_fields)

#: the flags of a gated report (audit, consistency): where it is written, and the gate given
#: as METRIC=VALUE pairs or a file (each command has its own --min-r2 and orthogonality flag)
REPORT_FLAGS = (
    ("json_path", "Path | None", typer.Option(None, "--json", help="write the report as JSON")),
    ("junit", "Path | None", typer.Option(None, "--junit", help="JUnit XML, a testcase per "
                                           "gate")),
    ("markdown", "Path | None", typer.Option(None, "--markdown", help="Markdown summary")),
    ("keys", "bool", KeysOpt),
    ("min", "list[str]", typer.Option([], "--min", help="gate: METRIC=VALUE, metric ≥ value "
                                      "(repeatable)")),
    ("max", "list[str]", typer.Option([], "--max", help="gate: METRIC=VALUE, metric ≤ value "
                                      "(repeatable)")),
    ("gate", "Path | None", typer.Option(None, "--gate", help="TOML file with [min] / [max] "
                                         "tables")),
)
report_flags = flag_group("report", REPORT_FLAGS)


def _encoder_inputs(encoder: dict) -> list[tuple[Path | None, str]]:
    """The paths an encoder's evaluation reads or fills (``--data``, ``--cache-dir``): no
    output may be one of them."""
    return [(encoder["data"], "--data"), (encoder["cache_dir"], "--cache-dir")]


def _check_reports(flags: dict, inputs: list) -> None:
    """The report files of ``flags`` checked writable (and not an input, the gate file
    included) before any work; a stale report at their paths removed."""
    check_outputs(_report_outputs([(flags["json_path"], "--json"), (flags["junit"], "--junit"),
                                   (flags["markdown"], "--markdown")]),
                  [*inputs, (flags["gate"], "--gate")], remove_stale=True)


def _finish(report, table, flags: dict, kind: str = "audit") -> None:
    """Print a gated report, write the --json/--junit/--markdown files its ``flags`` name,
    exit with its code."""
    from .report import audit_junit, audit_markdown

    json_path, junit, markdown = flags["json_path"], flags["junit"], flags["markdown"]
    piped = any(to_stdout(p) for p in (json_path, junit, markdown))
    (err if piped else out).print(table)  # stdout carries the report alone
    if report.reason:
        err.print(f"[yellow]inconclusive:[/yellow] {escape(report.reason)}", highlight=False,
                  soft_wrap=True)
    if json_path is not None:
        _emit(json_path, json_text(report.to_dict()))
    if junit is not None:
        _emit(junit, audit_junit(report))
    if markdown is not None:
        _emit(markdown, audit_markdown(report, kind))
    failed = [t.metric for t in report.failed]
    if failed:
        err.print(f"[red]gate failed:[/red] {', '.join(failed)}", highlight=False, soft_wrap=True)
    raise typer.Exit(report.exit_code)


@app.command()
@cli_errors
@report_flags
@encoder_flags
def audit(
    targets: list[Path] = typer.Argument(..., help="encoders or arrays to audit: "
                                         + ENCODER_FORMS + "; several (e.g. seeds of one "
                                         "recipe) are gated together, see --reduce"),
    reduce: str = typer.Option(default(AuditRequest, "reduce"), "--reduce", help="with several "
                               "targets, gate the "
                               "worst run's value of each gated metric, or the median"),
    report: dict = None,  # the REPORT_FLAGS (report_flags)
    encoder: dict = None,  # the ENCODER_FLAGS (encoder_flags)
    n_eval: int | None = typer.Option(None, "--n-eval", help="evaluation pairs (default: "
                                      f"the training eval set, else {_d('n_eval')}; reacher "
                                      f"without --data: {_d('rendered_eval_pairs')} rendered pairs)"),
    seed: int | None = typer.Option(None, "--seed", help="eval-set and split seed (default: "
                                    "a checkpoint's training seed, else 0)"),
    bootstrap: int = typer.Option(default(AuditRequest, "bootstrap"), "--bootstrap",
                                  help="bootstrap resamples for CIs"),
    test_fraction: float | None = typer.Option(None, "--test-fraction", help="held-out share "
                                               f"of rows (default {TEST_FRACTION:g}; not where a "
                                               "world fixes its evaluation images, as Reacher "
                                               "does)"),
    circular: str | None = typer.Option(None, "--circular", help="comma-separated latent "
                                        "indices that are angles"),
    gauss_sims: int = typer.Option(default(AuditRequest, "gauss_sims"), "--gauss-sims",
                                   help="Gaussianity p-value: 0 from the asymptotic null "
                                   "law; N > 0 from N simulated Gaussian data sets of the "
                                   "same size (exact, p ≥ 1/(N+1))"),
    min_r2: float | None = typer.Option(None, "--min-r2", help="gate: held-out R²(h → z) ≥"),
    max_orth: float | None = typer.Option(None, "--max-orthogonality-error",
                                          help="gate: orthogonality error ≤"),
    label_free: bool = typer.Option(False, "--label-free", help="ignore the true latents z: "
                                    "the verdict a project without them would get (arrays "
                                    "without z are audited label-free anyway)"),
) -> None:
    """Audit any encoder: identifiability metrics, a pass/fail gate and CI-friendly reports.

    Exit codes: 0 pass, 1 a threshold failed, 2 bad input or usage, 3 inconclusive
    (collapsed or degenerate embedding, NaN/Inf, too few samples).
    """
    from .auditing import run_audit
    from .report import audit_table

    check_seed(seed)
    _check_reports(report, [*((t, "the input") for t in targets), *_encoder_inputs(encoder)])
    result = run_audit(AuditRequest(
        targets=list(targets), reduce=reduce, **encoder, n_eval=n_eval, seed=seed,
        bootstrap=bootstrap, test_fraction=test_fraction, circular=circular or (),
        gauss_sims=gauss_sims, min_r2=min_r2, max_orthogonality_error=max_orth,
        min=report["min"], max=report["max"], gate=report["gate"], label_free=label_free))
    _finish(result, audit_table(result, report["keys"]), report)


@app.command()
@cli_errors
@report_flags
@encoder_flags
def consistency(
    targets: list[Path] = typer.Argument(..., help="two or more runs: arrays with h (.npy, or h "
                                         "in .npz/.safetensors) embedding the same inputs, or "
                                         "encoders in any form audit takes"),
    report: dict = None,  # the REPORT_FLAGS (report_flags)
    encoder: dict = None,  # the ENCODER_FLAGS (encoder_flags)
    n_eval: int | None = typer.Option(None, "--n-eval", help="inputs to embed (default: the "
                                      f"first checkpoint's eval set, else {_d('n_eval')}; reacher "
                                      f"without --data: {_d('rendered_eval_pairs')} rendered pairs)"),
    seed: int | None = typer.Option(None, "--seed", help="inputs and split seed (default: the "
                                    "first checkpoint's training seed, else 0)"),
    test_fraction: float = typer.Option(default(ConsistencyRequest, "test_fraction"),
                                        "--test-fraction", help="held-out share of rows"),
    min_r2: float | None = typer.Option(None, "--min-r2", help="gate: consistency_r2 (worst "
                                        "pair, held-out) ≥"),
    max_orth: float | None = typer.Option(None, "--max-orthogonality-error",
                                          help="gate: consistency_orthogonality_error ≤"),
) -> None:
    """Do two or more runs agree up to a rotation? No true latents needed.

    Embeddings of the same inputs from different seeds, checkpoints or architectures: for
    every pair and both directions, the held-out R² of the linear map between them, its
    orthogonality error and the Procrustes error. Runs that each recovered the latents up to
    a rotation differ by a rotation. Exit codes as audit: 0 pass, 1 a threshold failed, 2 bad
    input or usage, 3 inconclusive (a collapsed run, NaN/Inf, different numbers of inputs).
    """
    from .agreement import run_consistency
    from .report import consistency_table

    check_seed(seed)
    from .limits import check_runs

    check_runs(len(targets))
    _check_reports(report, [*((t, "the run") for t in targets), *_encoder_inputs(encoder)])
    result = run_consistency(ConsistencyRequest(
        targets=list(targets), **encoder, n_eval=n_eval, seed=seed, test_fraction=test_fraction,
        min_r2=min_r2, max_orthogonality_error=max_orth, min=report["min"], max=report["max"],
        gate=report["gate"]))
    _finish(result, consistency_table(result, report["keys"]), report, "consistency")


@app.command()
@cli_errors
@encoder_flags
def embed(
    target: Path = EncoderArg,
    out_path: Path = typer.Option(..., "--out", "-o", help="the .npz to write: z, h; h_prime "
                                  "and rho where the world has pairs; x on vector worlds (the "
                                  "raw-mixing baseline); circular; the split's seed, and "
                                  "test_rows where the world fixes its held-out rows"),
    encoder: dict = None,  # the ENCODER_FLAGS (encoder_flags)
    n_eval: int | None = typer.Option(None, "--n-eval", help="inputs to embed (default: the "
                                      f"training eval set, else {_d('n_eval')}; reacher "
                                      f"without --data: {_d('rendered_eval_pairs')} rendered pairs)"),
    seed: int | None = typer.Option(None, "--seed", help="evaluation-set seed (default: a "
                                    "checkpoint's training seed, else 0)"),
) -> None:
    """Embed a world's evaluation set with any encoder and write the arrays (z, h, h′, ρ)
    as an .npz: what audit would measure, to look at, store, compare (`idaudit consistency`)
    or audit later (`idaudit audit OUT.npz` gives the same numbers). Options as audit's."""
    from .auditing import check_embed_out, run_embed
    from .requests import EmbedRequest

    check_seed(seed)
    check_embed_out(out_path)  # before check_outputs removes a stale file there
    check_outputs([(out_path, "--out")], [(target, "the target"), *_encoder_inputs(encoder)],
                  remove_stale=True)
    inp = run_embed(EmbedRequest(target=target, out=out_path, n_eval=n_eval, seed=seed,
                                 **encoder))
    pairs = "" if inp.h_prime is None else f", h_prime (ρ = {inp.rho:g})"
    out.print(f"wrote {out_path}: z {tuple(inp.z.shape)}, h {tuple(inp.h.shape)}{pairs}",
              highlight=False)


@app.command("metrics")
@cli_errors
def metrics_(
    json_path: Path | None = typer.Option(None, "--json", help="write the catalogue here as a "
                                          "JSON list, one object per metric"),
) -> None:
    """Every metric idaudit reports: its key (what --min, --max and gate files name), label,
    which way is better, what the audit needs to report it (z, h_prime, rho, bootstrap) and
    what it means."""
    from .catalogue import catalogue_json
    from .report import catalogue_table

    check_outputs(_report_outputs([(json_path, "--json")]), remove_stale=True)
    if not to_stdout(json_path):  # stdout carries the JSON alone
        out.print(catalogue_table())
    if json_path is not None:
        _emit(json_path, json_text(catalogue_json()))
        if not to_stdout(json_path):
            out.print(f"wrote {json_path}")


@app.command()
@cli_errors
@encoder_flags
def plan(
    target: Path = EncoderArg,
    encoder: dict = None,  # the ENCODER_FLAGS (encoder_flags)
    pairs: int = typer.Option(default(PlanRequest, "pairs"), "--pairs", "-k",
                              help="random start/goal pairs"),
    waypoints: int = typer.Option(default(PlanRequest, "waypoints"), "--waypoints",
                                  help="segments per plan"),
    gallery: int | None = typer.Option(None, "--gallery", help="k-NN decoder gallery size "
                                       f"(synthetic worlds; default {_d('gallery')})"),
    seed: int = typer.Option(default(PlanRequest, "seed"), "--seed",
                             help="seed of the start/goal pairs (and the gallery)"),
    json_path: Path | None = typer.Option(None, "--json", help="write the results here"),
    plot: Path | None = typer.Option(None, "--plot", help="PNG of the planned paths next to "
                                     "the oracle's (needs the plot extra)"),
) -> None:
    """Latent straight-line plans against the oracle, and LQR value equivalence.

    Takes every encoder form `audit` takes, on its checkpoint's world, --world or --data; or
    an array file with a gallery of z and h (starts and goals are drawn from its rows). A
    median cost ratio near 1 means the embedding plans like the true latents.
    """
    from .planning import run_plan
    from .report import plan_table

    check_outputs(_report_outputs([(json_path, "--json")]) + [(plot, "--plot")],
                  [(target, "the target"), *_encoder_inputs(encoder)], remove_stale=True)
    report = run_plan(PlanRequest(
        target=target, **encoder, seed=seed,
        pairs=pairs, waypoints=waypoints, gallery=gallery))
    say = err if to_stdout(json_path) else out  # stdout carries the JSON alone
    say.print(plan_table(report.metrics))
    if plot is not None:
        report.plot(plot)
        say.print(f"wrote {plot}")
    if json_path is not None:
        _emit(json_path, json_text(report.to_dict()))
        if not to_stdout(json_path):
            out.print(f"wrote {json_path}")


DEMO_MIN_R2 = 0.95  # the demo's gate: the spiral run reaches ≈ 0.98 in its 6000 steps


@app.command()
@cli_errors
def demo(
    out_dir: Path = typer.Option(Path("demo-out"), "--out", "-o", help="output directory"),
    steps: int = typer.Option(6000, "--steps", help="training steps (the paper uses 20 000)"),
    seed: int = typer.Option(1337, "--seed"),
) -> None:
    """The whole loop on the spiral world: world → train → audit (gated on held-out R² ≥ 0.95,
    exit codes as audit's) → plan; about a minute on 2 CPU cores."""
    from .auditing import audit as run_audit
    from .io import write_json
    from .planning import plan as run_plan
    from .report import audit_table, plan_table
    from .runs import run
    from .worlds import KINDS, make_spec

    check_outputs([(out_dir, "--out")], directory=True)
    spec = make_spec("spiral", rho=0.95)
    pairs_path = out_dir / "spiral-pairs.safetensors"
    KINDS.get(spec.name).write(spec, pairs_path, 10_000, seed, None, progress=False)
    out.print(f"1/4 world: 10 000 spiral pairs → {pairs_path}")
    out.print(f"2/4 train: LeJEPA, λ = 1e-3, {steps} steps")
    record = run({"world": "spiral", "rho": 0.95, "objective": "lejepa", "lamb": 1e-3,
                  "steps": steps, "seed": seed}, out_dir / "spiral-lejepa.safetensors",
                 progress=True)
    report = run_audit(encoder=record.checkpoint, gauss_sims=0, min_r2=DEMO_MIN_R2)
    write_json(out_dir / "audit.json", report.to_dict())
    out.print(f"3/4 audit, gated on held-out R²(h → z) ≥ {DEMO_MIN_R2}")
    out.print(audit_table(report))
    planned = run_plan(record.checkpoint, pairs=100, seed=seed)
    write_json(out_dir / "plan.json", planned.to_dict())
    out.print("4/4 plan")
    out.print(plan_table(planned.metrics))
    out.print(f"outputs in {out_dir}/ (checkpoint, audit.json, plan.json)")
    if report.exit_code:  # the gate's verdict, as `idaudit audit` would exit
        raise typer.Exit(report.exit_code)


@app.command()
@cli_errors
def sweep(
    suite: str = typer.Argument(..., help="2d | scaling | gennorm | grid | reacher, or a TOML "
                                "file with [fixed] options and [grid] lists of train options"),
    out_dir: Path = typer.Option(Path(default(SweepRequest, "out")), "--out", "-o",
                                 help="results directory"),
    seeds: int | None = typer.Option(None, "--seeds", help="keep the first N seeds"),
    steps: int | None = typer.Option(None, "--steps", help="cap the training steps"),
    dims: str | None = typer.Option(None, "--dims", help="comma-separated dims to keep"),
    objectives: str | None = typer.Option(None, "--objectives", help="comma-separated "
                                          "objectives to keep"),
    only: list[str] = typer.Option([], "--only", help="keep runs whose option is one of the "
                                   "values, e.g. --only world=spiral --only lamb=1e-3,5e-3"),
    set_: list[str] = typer.Option([], "--set", help="override an option on every run, e.g. "
                                   "--set pairs=3000 --set epochs=10 (Reacher)"),
    workers: int | None = typer.Option(None, "--workers", help="parallel runs (default: cores, "
                                       "or one per GPU)"),
    executor: str = typer.Option(default(SweepRequest, "executor"), "--executor",
                                 help="local (process pool) | ray"),
    address: str | None = typer.Option(None, "--address", help="Ray cluster address (default: "
                                       "a local Ray instance)"),
    list_only: bool = typer.Option(False, "--list", help="print the runs, run nothing"),
    checkpoints: bool = typer.Option(default(SweepRequest, "checkpoints"), "--checkpoints",
                                     help="keep each trained encoder as "
                                     "OUT/checkpoints/ID.safetensors (for audit and plan)"),
) -> None:
    """Run a suite of trainings (resumable: finished runs are skipped) in a process pool.

    Each run writes OUT/runs/ID.json; rerunning the same command runs only what is missing.
    Reacher datasets are rendered first, under OUT/data. See docs/sweeps.md.
    """
    from rich.table import Table

    from .sweep import run_id, run_sweep_request, sweep_runs

    req = SweepRequest(suite=suite, out=out_dir, seeds=seeds, steps=steps, dims=dims,
                       objectives=objectives, only=only, set=set_, workers=workers,
                       executor=executor, address=address, checkpoints=checkpoints)
    runs = sweep_runs(req)
    if list_only:
        table = Table(title=f"{suite}: {len(runs)} runs")
        keys = sorted({k for r in runs for k in r})
        for k in ["id", *keys]:
            table.add_column(k)
        for r in runs:
            table.add_row(run_id(r), *[str(r.get(k, "")) for k in keys])
        out.print(table)
        return
    counts = run_sweep_request(req, runs, progress=True)
    out.print(f"{counts['total']} runs: {counts['skipped']} already done, {counts['ok']} ok, "
              f"{counts['failed']} failed; results in {out_dir / 'runs'}")
    if counts["failed"]:  # not 1: that code means a gate failed
        raise typer.Exit(EXIT_RUNS_FAILED)


@app.command()
@cli_errors
def report(
    out_dir: Path = typer.Argument(..., help="a directory written by idaudit sweep"),
    figures: bool = typer.Option(True, "--figures/--no-figures",
                                 help="draw the figures (needs matplotlib: the plot extra)"),
) -> None:
    """Aggregate a sweep: mean ± std over seeds as summary.csv and summary.md (the paper's
    table layouts), and the figures the runs support as PNGs under DIR/figures."""
    from .report import aggregate, load_results, write_tables

    ok, failed = load_results(out_dir)
    if not ok:
        raise IdauditError(f"{out_dir} has no finished runs")
    rows = aggregate(ok)
    paths = write_tables(rows, out_dir)
    out.print(paths["markdown"].read_text(), markup=False, soft_wrap=True)
    if failed:
        err.print(f"{len(failed)} failed runs are not in the tables (see *.failed.json)")
    out.print(f"wrote {paths['csv']} and {paths['markdown']}")
    if figures:
        from .figures import draw_figures

        for path in draw_figures(ok, rows, out_dir):
            out.print(f"wrote {path}")


@app.command()
@cli_errors
def doctor() -> None:
    """Check the installation (torch, numba, MuJoCo, headless GL) and say what to install."""
    from rich.table import Table

    from .doctor import run_checks

    checks = run_checks()
    table = Table(title="idaudit doctor")
    table.add_column("check")
    table.add_column("")
    table.add_column("detail")
    table.add_column("fix", style="dim")
    for c in checks:
        table.add_row(c["name"], "[green]ok[/green]" if c["ok"] else "[red]missing[/red]",
                      escape(c["detail"]), escape(c["fix"] or ""))
    out.print(table)
    if not all(c["ok"] for c in checks):
        raise typer.Exit(1)


def _plain_help_texts(app: typer.Typer) -> None:
    """Escape rich markup in every help text and docstring, so that ``[min]``, ``[, h_prime]``
    and the like print as written (typer renders help through rich, which takes ``[word]`` for
    a style tag and drops it). Options shared by several commands are escaped once."""
    import inspect

    seen: set[int] = set()
    for cmd in app.registered_commands:
        doc = cmd.help if cmd.help is not None else inspect.getdoc(cmd.callback)
        if doc:
            cmd.help = escape(doc)
        for param in inspect.signature(cmd.callback).parameters.values():
            info = param.default
            if isinstance(info, typer.models.ParameterInfo) and id(info) not in seen:
                seen.add(id(info))
                if info.help:
                    info.help = escape(info.help)


_plain_help_texts(app)


def main() -> None:
    try:
        app()
    except IdauditError as exc:  # raised outside a command (should not happen)
        err.print(f"error: {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        err.print("interrupted")
        raise SystemExit(130) from None
    except BrokenPipeError:
        _quiet_stdout()
        raise SystemExit(EXIT_BROKEN_PIPE) from None
    except Exception as exc:  # noqa: BLE001 - outside every command's own error layer
        if show_tracebacks():
            raise
        err.print(escape(internal_error_line(exc, "outside a command")), highlight=False,
                  soft_wrap=True)
        raise SystemExit(EXIT_INTERNAL) from None


if __name__ == "__main__":
    main()

