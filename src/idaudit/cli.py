"""The ``idaudit`` command: a thin typer layer over the library."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from .errors import IdauditError

app = typer.Typer(
    help="Did your self-supervised encoder learn the world? Worlds with known latents, "
         "LeJEPA/VICReg/InfoNCE training, identifiability audits and latent planning.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
out = Console()
err = Console(stderr=True)


def cli_errors(fn):
    """Turn IdauditError into one line on stderr and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except IdauditError as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None

    return wrapper


# ---- shared options --------------------------------------------------------------------

WorldOpt = typer.Option("spiral", "--world", "-w",
                        help="spiral | banana | sinusoid | nvp (2D RealNVP coupling) | coupling "
                             "(any even --dim)")
DimOpt = typer.Option(None, "--dim", "-n", help="latent dimension (coupling: any even N; 2D "
                      "worlds: 2)")
SourceOpt = typer.Option("gaussian", "--source", help="latent law: gaussian | laplace | gennorm")
AlphaOpt = typer.Option(None, "--alpha", help="shape α of the gennorm source (2 = Gaussian, "
                        "1 = Laplace)")
RhoOpt = typer.Option(0.95, "--rho", help="OU correlation ρ in (0, 1): z′ = ρz + √(1−ρ²)η")
LayersOpt = typer.Option(None, "--layers", help="coupling layers (default 4; the encoder matches)")


def _spec(world, dim, source, alpha, rho, layers):
    from .worlds import make_spec

    return make_spec(world, dim=dim, source=source, alpha=alpha, rho=rho, layers=layers)


def _parse_sigma(sigma: str) -> float | str:
    from .losses import SIGMA_RULES

    if sigma in SIGMA_RULES:
        return sigma
    try:
        value = float(sigma)
    except ValueError:
        raise IdauditError(f"--sigma must be a positive number, 'auto' or 'sqrtn', "
                           f"got {sigma!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise IdauditError(f"--sigma must be > 0, got {sigma}")
    return value


# ---- commands --------------------------------------------------------------------------


@app.command()
@cli_errors
def world(
    name: str | None = typer.Argument(None, help="world name (same as --world)"),
    world_: str = WorldOpt,
    dim: int | None = DimOpt,
    source: str = SourceOpt,
    alpha: float | None = AlphaOpt,
    rho: float = RhoOpt,
    layers: int | None = LayersOpt,
    pairs: int = typer.Option(10_000, "--pairs", help="number of (z, z′) pairs"),
    seed: int = typer.Option(0, "--seed"),
    out_path: Path = typer.Option(..., "--out", "-o", help="output file (.safetensors), or "
                                  "a directory for reacher"),
    trajectory: bool = typer.Option(False, "--trajectory", help="reacher: pairs from episodes "
                                    "of a goal-reaching controller instead of OU pairs"),
    stride: int = typer.Option(8, "--stride", help="reacher --trajectory: steps between views"),
    n_eval: int = typer.Option(10_000, "--n-eval", help="reacher: shared evaluation images"),
    workers: int | None = typer.Option(None, "--workers", help="reacher: render processes "
                                       "(default: one per core)"),
) -> None:
    """Write n positive pairs (z, z′, x, x′) of a world, its spec in the file's metadata.

    `idaudit world reacher --rho 0.95 --pairs N --out DIR` renders MuJoCo Reacher images
    (resumable: rerun the same command after an interruption).
    """
    from .worlds import build_world
    from .worlds.dataset import save_pairs

    if pairs < 1:
        raise IdauditError(f"--pairs must be ≥ 1, got {pairs}")
    if (name or world_) == "reacher":
        from .worlds.reacher_data import ReacherSpec, build_dataset, read_meta

        rspec = ReacherSpec(mode="trajectory" if trajectory else "ou", rho=rho, stride=stride,
                            pairs=pairs, n_eval=n_eval, seed=seed)
        root = build_dataset(out_path, rspec, workers=workers, progress=True)
        meta = read_meta(root)
        extra = (f"; per-joint autocorrelation ρ₀ = {meta['rho_0']:.3f}, ρ₁ = {meta['rho_1']:.3f}"
                 if trajectory else "")
        out.print(f"Reacher dataset ({rspec.mode}, {pairs} pairs, {n_eval} eval images) in "
                  f"{root}{extra}")
        return
    spec = _spec(name or world_, dim, source, alpha, rho, layers)
    path = save_pairs(out_path, build_world(spec), pairs, seed)
    out.print(f"wrote {pairs} pairs of {spec.name} (N={spec.dim}, {spec.source}, ρ={spec.rho}) "
              f"to {path}")


@app.command()
@cli_errors
def train(
    world_: str = WorldOpt,
    dim: int | None = DimOpt,
    source: str = SourceOpt,
    alpha: float | None = AlphaOpt,
    rho: float = RhoOpt,
    layers: int | None = LayersOpt,
    objective: str = typer.Option("lejepa", "--objective", "-O",
                                  help="lejepa (SIGReg + alignment) | whiten (VICReg-style) | "
                                       "infonce"),
    lamb: float | None = typer.Option(None, "--lamb", help="regulariser weight λ in [0, 1] "
                                      "(default 1e-3; reacher 5e-3)"),
    sigma: str = typer.Option("1.0", "--sigma", help="InfoNCE kernel width σ; 'auto' = "
                              "√((1−ρ_v²)/ρ_v), matched to the views' OU channel; 'sqrtn' = "
                              "√(N/2)"),
    steps: int = typer.Option(20_000, "--steps"),
    batch: int = typer.Option(256, "--batch", help="pairs per step (two views each)"),
    lr: float = typer.Option(3e-3, "--lr"),
    seed: int = typer.Option(0, "--seed"),
    inits: int = typer.Option(1, "--inits", help="train K encoders, keep the lowest final loss"),
    eval_every: int = typer.Option(500, "--eval-every"),
    n_eval: int = typer.Option(10_000, "--n-eval", help="size of the fixed evaluation set"),
    views: str = typer.Option("anchor", "--views",
                              help="anchor: both views one OU step from a shared z (the paper's "
                                   "code; views correlate ρ²) | pair: views (z, z′)"),
    encoder: str | None = typer.Option(None, "--encoder",
                                          help="mlp | coupling | cnn (default: the world's)"),
    encoder_kwargs: str | None = typer.Option(None, "--encoder-kwargs", help="JSON object"),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
    out_path: Path | None = typer.Option(None, "--out", "-o",
                                            help="checkpoint path (.safetensors)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    pairs: int = typer.Option(100_000, "--pairs", help="reacher: rendered training pairs"),
    epochs: int = typer.Option(100, "--epochs", help="reacher: epochs over the pairs"),
    trajectory: bool = typer.Option(False, "--trajectory", help="reacher: controller "
                                    "trajectories instead of OU pairs"),
    stride: int = typer.Option(8, "--stride", help="reacher --trajectory: steps between views"),
    data: Path | None = typer.Option(None, "--data", help="reacher: dataset directory "
                                     "(default data/reacher-…; rendered if missing)"),
    workers: int | None = typer.Option(None, "--workers", help="reacher: render processes"),
) -> None:
    """Train an encoder on a world; write a self-describing checkpoint and a JSON log.

    `--world reacher` renders (or reuses) a MuJoCo dataset and trains the paper's CNN over
    epochs (defaults: 100 000 pairs, 100 epochs, λ = 5e-3; shrink with --pairs/--epochs).
    """
    from .checkpoint import save_run
    from .loaders import parse_json_object
    from .report import metrics_table
    from .train import TrainConfig
    from .train import train as run_train
    from .worlds import build_world

    if world_ == "reacher":
        from .pixel import train_reacher
        from .report import audit_table
        from .train.pixels import PixelConfig
        from .worlds.reacher_data import ReacherSpec

        rspec = ReacherSpec(mode="trajectory" if trajectory else "ou", rho=rho, stride=stride,
                            pairs=pairs, n_eval=n_eval, seed=seed).validate()
        pcfg = PixelConfig(lamb=5e-3 if lamb is None else lamb, epochs=epochs, batch=batch,
                           lr=lr, seed=seed, device=device).validate()
        ckpt = out_path or Path("runs") / f"reacher-{rspec.mode}-s{seed}.safetensors"
        log, metrics = train_reacher(rspec, pcfg, ckpt, data_dir=data, workers=workers,
                                     progress=not quiet,
                                     say=lambda m: err.print(escape(m), soft_wrap=True))
        from .audit import AuditReport

        out.print(audit_table(AuditReport(metrics=metrics, source=str(ckpt))))
        out.print(f"checkpoint {ckpt}; log {log}")
        return
    lamb = 1e-3 if lamb is None else lamb
    spec = _spec(world_, dim, source, alpha, rho, layers)
    cfg = TrainConfig(objective=objective, lamb=lamb, sigma=_parse_sigma(sigma), steps=steps,
                      batch=batch, lr=lr, seed=seed, inits=inits, eval_every=eval_every,
                      n_eval=n_eval, device=device, encoder=encoder, views=views,
                      encoder_kwargs=parse_json_object(encoder_kwargs, "--encoder-kwargs")).validate()
    if out_path is None:
        out_path = Path("runs") / f"{spec.name}-{objective}-s{seed}.safetensors"
    result = run_train(build_world(spec), cfg, progress=not quiet)
    out_path, log_path = save_run(out_path, spec, result)
    out.print(metrics_table(result.metrics, title=f"{spec.name} · {objective} · seed {seed}"))
    out.print(f"{result.steps_per_second:.0f} steps/s on {result.device}; "
              f"checkpoint {out_path}; log {log_path}")


@app.command()
@cli_errors
def audit(
    target: Path = typer.Argument(..., help="idaudit checkpoint, .safetensors weights (with "
                                  "--arch), TorchScript .pt, torch.export .pt2, or .npz / "
                                  ".safetensors arrays holding z, h [, h_prime, rho]"),
    json_path: Path | None = typer.Option(None, "--json", help="write the report as JSON"),
    junit: Path | None = typer.Option(None, "--junit", help="JUnit XML, a testcase per gate"),
    markdown: Path | None = typer.Option(None, "--markdown", help="Markdown summary"),
    arch: str | None = typer.Option(None, "--arch", help="module.path:factory returning the "
                                       "nn.Module for plain safetensors weights"),
    arch_kwargs: str | None = typer.Option(None, "--arch-kwargs", help="JSON kwargs for "
                                              "the factory"),
    trust_pickle: bool = typer.Option(False, "--trust-pickle", help="allow torch.load of a "
                                      "pickled module (runs arbitrary code)"),
    world_: str | None = typer.Option(None, "--world", "-w", help="evaluate on this world "
                                         "(default: the checkpoint's)"),
    dim: int | None = DimOpt,
    source: str = SourceOpt,
    alpha: float | None = AlphaOpt,
    rho: float = RhoOpt,
    layers: int | None = LayersOpt,
    data: Path | None = typer.Option(None, "--data", help="evaluate on a dataset written by "
                                        "idaudit world"),
    n_eval: int | None = typer.Option(None, "--n-eval", help="evaluation pairs (default: "
                                         "the training eval set, else 10 000)"),
    seed: int | None = typer.Option(None, "--seed", help="eval-set and split seed"),
    bootstrap: int = typer.Option(0, "--bootstrap", help="bootstrap resamples for CIs"),
    test_fraction: float = typer.Option(0.5, "--test-fraction", help="held-out share of rows"),
    circular: str | None = typer.Option(None, "--circular", help="comma-separated latent "
                                           "indices that are angles"),
    gauss_sims: int = typer.Option(50, "--gauss-sims", help="Gaussian simulations for the "
                                   "Gaussianity p-value (0: statistic only)"),
    min_r2: float | None = typer.Option(None, "--min-r2", help="gate: held-out R²(h → z) ≥"),
    max_orth: float | None = typer.Option(None, "--max-orthogonality-error",
                                             help="gate: orthogonality error ≤"),
    min_: list[str] = typer.Option([], "--min", help="gate: METRIC=VALUE, metric ≥ value "
                                   "(repeatable)"),
    max_: list[str] = typer.Option([], "--max", help="gate: METRIC=VALUE, metric ≤ value "
                                   "(repeatable)"),
    gate: Path | None = typer.Option(None, "--gate", help="TOML file with [min] / [max] "
                                        "tables"),
) -> None:
    """Audit any encoder: identifiability metrics, a pass/fail gate and CI-friendly reports.

    Exit codes: 0 pass, 1 a threshold failed, 2 bad input or usage, 3 inconclusive
    (collapsed or degenerate embedding, NaN/Inf, too few samples).
    """
    from .audit import audit_inputs, load_gate_file, make_threshold, parse_threshold
    from .io import atomic_write, write_json
    from .loaders import parse_json_object, resolve
    from .report import audit_junit, audit_markdown, audit_table

    thresholds = []
    if min_r2 is not None:
        thresholds.append(make_threshold("r2_h_to_z_heldout", "min", min_r2))
    if max_orth is not None:
        thresholds.append(make_threshold("orthogonality_error", "max", max_orth))
    thresholds += [parse_threshold(t, "min") for t in min_]
    thresholds += [parse_threshold(t, "max") for t in max_]
    if gate is not None:
        thresholds += load_gate_file(gate)
    if bootstrap < 0 or gauss_sims < 0:
        raise IdauditError("--bootstrap and --gauss-sims must be ≥ 0")
    if n_eval is not None and n_eval < 10:
        raise IdauditError(f"--n-eval must be ≥ 10, got {n_eval}")
    spec = _spec(world_, dim, source, alpha, rho, layers) if world_ else None
    inputs = resolve(target, arch=arch, arch_kwargs=parse_json_object(arch_kwargs, "--arch-kwargs"),
                     world_spec=spec, data=data, trust_pickle=trust_pickle, n_eval=n_eval,
                     seed=seed)
    if circular:
        try:
            inputs.circular = tuple(int(c) for c in circular.split(",") if c.strip())
        except ValueError:
            raise IdauditError(f"--circular expects comma-separated integers, got {circular!r}") \
                from None
    report = audit_inputs(inputs, thresholds, bootstrap=bootstrap, test_fraction=test_fraction,
                          seed=seed or 0, gauss_sims=gauss_sims)
    out.print(audit_table(report))
    if report.reason:
        err.print(f"[yellow]inconclusive:[/yellow] {escape(report.reason)}", highlight=False,
                  soft_wrap=True)
    if json_path is not None:
        write_json(json_path, report.to_dict())
    if junit is not None:
        text = audit_junit(report)
        atomic_write(junit, lambda tmp: Path(tmp).write_text(text))
    if markdown is not None:
        text_md = audit_markdown(report)
        atomic_write(markdown, lambda tmp: Path(tmp).write_text(text_md))
    failed = [t.metric for t in report.thresholds if t.passed is False]
    if failed:
        err.print(f"[red]gate failed:[/red] {', '.join(failed)}", highlight=False, soft_wrap=True)
    raise typer.Exit(report.exit_code)


@app.command()
@cli_errors
def plan(
    checkpoint: Path = typer.Argument(..., help="an idaudit checkpoint (.safetensors)"),
    pairs: int = typer.Option(100, "--pairs", "-k", help="random start/goal pairs"),
    waypoints: int = typer.Option(20, "--waypoints", help="segments per plan"),
    gallery: int = typer.Option(10_000, "--gallery", help="k-NN decoder gallery size"),
    seed: int = typer.Option(0, "--seed"),
    json_path: Path | None = typer.Option(None, "--json", help="write the results here"),
    plot: Path | None = typer.Option(None, "--plot", help="PNG of the planned paths next to "
                                     "the oracle's (needs the plot extra)"),
) -> None:
    """Latent straight-line plans against the oracle, and LQR value equivalence."""
    from .io import write_json
    from .plan import plan_checkpoint
    from .report import plan_table

    if pairs < 1 or waypoints < 1 or gallery < 5:
        raise IdauditError("--pairs and --waypoints must be ≥ 1 and --gallery ≥ 5")
    result = plan_checkpoint(checkpoint, pairs=pairs, waypoints=waypoints, gallery=gallery,
                             seed=seed)
    out.print(plan_table(result))
    if plot is not None:
        from .plan import plot_plans

        reacher = result.get("world", {}).get("name") == "reacher"
        plot_plans(result, plot, labels=("shoulder (rad)", "wrist (rad)") if reacher
                   else ("z₁", "z₂"))
        out.print(f"wrote {plot}")
    if json_path is not None:
        write_json(json_path, {k: v for k, v in result.items()})
        out.print(f"wrote {json_path}")


@app.command()
@cli_errors
def demo(
    out_dir: Path = typer.Option(Path("demo-out"), "--out", "-o", help="output directory"),
    steps: int = typer.Option(6000, "--steps", help="training steps (the paper uses 20 000)"),
    seed: int = typer.Option(1337, "--seed"),
) -> None:
    """The whole loop on the spiral world: world → train → audit → plan (a few minutes)."""
    from .audit import audit_checkpoint
    from .checkpoint import save_run
    from .io import write_json
    from .plan import plan_checkpoint
    from .report import metrics_table, plan_table
    from .train import TrainConfig
    from .train import train as run_train
    from .worlds import build_world, make_spec
    from .worlds.dataset import save_pairs

    spec = make_spec("spiral", rho=0.95)
    w = build_world(spec)
    save_pairs(out_dir / "spiral-pairs.safetensors", w, 10_000, seed)
    out.print(f"1/4 world: 10 000 spiral pairs → {out_dir / 'spiral-pairs.safetensors'}")
    cfg = TrainConfig(objective="lejepa", lamb=1e-3, steps=steps, seed=seed).validate()
    out.print(f"2/4 train: LeJEPA, λ = 1e-3, {steps} steps")
    result = run_train(w, cfg, progress=True)
    ckpt, _ = save_run(out_dir / "spiral-lejepa.safetensors", spec, result)
    report = audit_checkpoint(ckpt)
    write_json(out_dir / "audit.json", report)
    out.print("3/4 audit")
    out.print(metrics_table(report["metrics"], title="spiral · LeJEPA"))
    planned = plan_checkpoint(ckpt, pairs=100, seed=seed)
    write_json(out_dir / "plan.json", planned)
    out.print("4/4 plan")
    out.print(plan_table(planned))
    out.print(f"outputs in {out_dir}/ (checkpoint, audit.json, plan.json)")


@app.command()
@cli_errors
def sweep(
    suite: str = typer.Argument(..., help="2d | scaling | gennorm | grid | reacher, or a TOML "
                                "file with [fixed] options and [grid] lists of train options"),
    out_dir: Path = typer.Option(Path("sweeps"), "--out", "-o", help="results directory"),
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
    executor: str = typer.Option("local", "--executor", help="local (process pool) | ray"),
    address: str | None = typer.Option(None, "--address", help="Ray cluster address (default: "
                                       "a local Ray instance)"),
    list_only: bool = typer.Option(False, "--list", help="print the runs, run nothing"),
) -> None:
    """Run a suite of trainings (resumable: finished runs are skipped) in a process pool.

    Each run writes OUT/runs/ID.json; rerunning the same command runs only what is missing.
    Reacher datasets are rendered first, under OUT/data. See docs/sweeps.md.
    """
    from rich.table import Table

    from .sweep import load_suite, parse_assignments, run_id, run_sweep, shrink

    try:
        dim_list = [int(d) for d in dims.split(",")] if dims else None
    except ValueError:
        raise IdauditError(f"--dims expects comma-separated integers, got {dims!r}") from None
    overrides = parse_assignments(set_, "--set")
    if any(len(v) > 1 for v in overrides.values()):
        raise IdauditError("--set takes one value per option (use --only or a TOML grid to vary)")
    runs = shrink(load_suite(suite), seeds=seeds, steps=steps, dims=dim_list,
                  objectives=objectives.split(",") if objectives else None,
                  only=parse_assignments(only, "--only"),
                  overrides={k: v[0] for k, v in overrides.items()})
    if not runs:
        raise IdauditError("no runs left after --seeds/--dims/--objectives/--only")
    if list_only:
        table = Table(title=f"{suite}: {len(runs)} runs")
        keys = sorted({k for r in runs for k in r})
        for k in ["id", *keys]:
            table.add_column(k)
        for r in runs:
            table.add_row(run_id(r), *[str(r.get(k, "")) for k in keys])
        out.print(table)
        return
    counts = run_sweep(runs, out_dir, workers=workers, progress=True, executor=executor,
                       address=address)
    out.print(f"{counts['total']} runs: {counts['skipped']} already done, {counts['ok']} ok, "
              f"{counts['failed']} failed; results in {out_dir / 'runs'}")
    if counts["failed"]:
        raise typer.Exit(1)


@app.command()
@cli_errors
def report(
    out_dir: Path = typer.Argument(..., help="a directory written by idaudit sweep"),
    figures: bool = typer.Option(True, "--figures/--no-figures",
                                 help="draw the figures (needs matplotlib: the plot extra)"),
) -> None:
    """Aggregate a sweep: mean ± std over seeds as summary.csv and summary.md (the paper's
    table layouts), and the figures the runs support as PNGs under DIR/figures."""
    from .sweep import aggregate, load_results, write_tables

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


def main() -> None:
    try:
        app()
    except IdauditError as exc:  # raised outside a command (should not happen)
        err.print(f"error: {exc}")
        raise SystemExit(exc.exit_code) from None


if __name__ == "__main__":
    main()

