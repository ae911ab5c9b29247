"""``idaudit train``: train an encoder on a world."""

from __future__ import annotations

from pathlib import Path

import typer

from idaudit.cli.application import app, cli_errors, out, say
from idaudit.cli.options import (
    AlphaOpt,
    DataSeedOpt,
    DimOpt,
    ImageSizeOpt,
    LayersOpt,
    RhoOpt,
    SourceOpt,
    StrideOpt,
    TrajectoryOpt,
    WorkersOpt,
    WorldOpt,
    world_default,
)
from idaudit.core.defaults import DATA_ROOT, OFFICIAL_LAMB, TRAIN_DEFAULTS, default_text
from idaudit.core.registered import OBJECTIVES, choices
from idaudit.core.requests import TrainRequest


@app.command()
@cli_errors
def train(
    world_: str | None = WorldOpt,
    dim: int | None = DimOpt,
    source: str | None = SourceOpt,
    alpha: float | None = AlphaOpt,
    rho: float | None = RhoOpt,
    layers: int | None = LayersOpt,
    mixing_seed: int | None = typer.Option(None, "--mixing-seed", help="coupling worlds: the "
                                           "seed of the mixing network g (default "
                                           f"{world_default('mixing_seed')})"),
    objective: str | None = typer.Option(None, "--objective", "-O",
                                         help=choices(OBJECTIVES)),
    lamb: float | None = typer.Option(None, "--lamb", help="regulariser weight λ in [0, 1] "
                                      "(lejepa, whiten)"),
    sigma: str | None = typer.Option(None, "--sigma", help="InfoNCE kernel width σ; "
                                     "'auto' = √((1−ρ_v²)/ρ_v), matched to the views' OU "
                                     "channel; 'sqrtn' = √(N/2)"),
    steps: int | None = typer.Option(None, "--steps", help="training steps on synthetic worlds"),
    epochs: int | None = typer.Option(None, "--epochs", help="epochs over the pairs on dataset "
                                      "worlds (reacher, --data)"),
    batch: int | None = typer.Option(None, "--batch", help="pairs per step (two views each)"),
    lr: float | None = typer.Option(None, "--lr", help="peak learning rate"),
    weight_decay: float | None = typer.Option(None, "--weight-decay", help="AdamW's weight "
                                              "decay (default "
                                              f"{default_text(TRAIN_DEFAULTS['weight_decay'])}, "
                                              "or the world's recipe's)"),
    clip: float | None = typer.Option(None, "--clip", help="clip the gradients' norm at this "
                                      "value (default: none, or the world's recipe's)"),
    schedule: str | None = typer.Option(None, "--schedule", help="learning-rate schedule: "
                                        "constant_cosine (the peak for the first half, then "
                                        "cosine to 0) | cosine_epochs (cosine stepped once per "
                                        f"epoch) (default {TRAIN_DEFAULTS['schedule']}, or the "
                                        "world's recipe's)"),
    n_slices: int | None = typer.Option(None, "--n-slices", help="random directions of "
                                        "SIGReg's sliced Gaussianity test (lejepa) (default "
                                        f"{TRAIN_DEFAULTS['n_slices']})"),
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
                                            "world's own, e.g. the matched inverse coupling on "
                                            "coupling; mlp and coupling take their widths from "
                                            "a vector world; the run's first line names it)"),
    encoder_kwargs: str | None = typer.Option(None, "--encoder-kwargs", help="JSON object"),
    device: str | None = typer.Option(None, "--device", help="auto (CUDA when present) | cpu "
                                      "| cuda; it chooses the reacher recipe"),
    out_path: Path | None = typer.Option(None, "--out", "-o", readable=False,
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
    data_root: Path | None = typer.Option(None, "--data-root", help="reacher: where a "
                                          "dataset is rendered unless --data names the place "
                                          f"(default: {DATA_ROOT})"),
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
    from idaudit.core.jsontext import parse_json_object
    from idaudit.evaluations.report import metrics_table
    from idaudit.training.runs import default_checkpoint_path, resolve_request, run_train

    req = TrainRequest(
        world=world_, dim=dim, source=source, alpha=alpha, rho=rho, layers=layers,
        mixing_seed=mixing_seed, objective=objective, lamb=lamb, sigma=sigma, steps=steps,
        epochs=epochs, batch=batch, lr=lr, weight_decay=weight_decay, clip=clip,
        schedule=schedule, n_slices=n_slices, seed=seed, inits=inits, eval_every=eval_every,
        n_eval=n_eval, views=views,
        form=form, n_views=n_views, projector=projector, encoder=encoder,
        encoder_kwargs=parse_json_object(encoder_kwargs, "--encoder-kwargs"),
        device=device, pairs=pairs, trajectory=trajectory, stride=stride, data_seed=data_seed,
        image_size=image_size, recipe=recipe, data=data, out=out_path, workers=workers,
        data_root=data_root)
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
