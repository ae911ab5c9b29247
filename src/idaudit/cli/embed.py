"""``idaudit embed``: embed a world's evaluation set with any encoder."""

from __future__ import annotations

from pathlib import Path

import typer

from idaudit.cli.application import app, cli_errors, out
from idaudit.cli.options import EncoderArg, encoder_flags, n_eval_option
from idaudit.core.errors import check_seed

__all__: list[str] = []  # the command registers itself with the app; nothing to import


@app.command()
@cli_errors
@encoder_flags
def embed(
    target: Path = EncoderArg,
    out_path: Path = typer.Option(..., "--out", "-o", readable=False,
                                  help="the .npz to write: z, h; h_prime "
                                  "and rho where the world has pairs; x on vector worlds (the "
                                  "raw-mixing baseline); circular (with angle_sigma, the "
                                  "angles' law, where the world knows it); the split's seed, and "
                                  "test_rows where the world fixes its held-out rows"),
    encoder: dict = None,  # the encoder flags (core/options.ENCODER)
    n_eval: int | None = n_eval_option("inputs to embed"),
    seed: int | None = typer.Option(None, "--seed", help="evaluation-set seed (default: a "
                                    "checkpoint's training seed, else 0)"),
) -> None:
    """Embed a world's evaluation set with any encoder and write the arrays (z, h, h′, ρ)
    as an .npz: what audit would measure, to look at, store, compare (`idaudit consistency`)
    or audit later (`idaudit audit OUT.npz` gives the same numbers). Options as audit's."""
    from idaudit.core.requests import EmbedRequest
    from idaudit.evaluations.pipeline import check_embed_outputs, run_embed

    check_seed(seed)
    check_embed_outputs(target, out_path, encoder)  # a stale file gone even if an option is bad
    inp = run_embed(EmbedRequest.from_options(target=target, out=out_path, n_eval=n_eval, seed=seed,
                                 **encoder))
    pairs = "" if inp.h_prime is None else f", h_prime (ρ = {inp.rho:g})"
    out.print(f"wrote {out_path}: z {tuple(inp.z.shape)}, h {tuple(inp.h.shape)}{pairs}",
              highlight=False)
