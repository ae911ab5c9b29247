"""``idaudit embed``: embed a world's evaluation set with any encoder."""

from __future__ import annotations

from pathlib import Path

from idaudit.cli.application import app, cli_errors, out
from idaudit.cli.options import EncoderArg, encoder_flags, option_flags
from idaudit.core.command_options import EMBED
from idaudit.core.errors import check_seed

__all__: list[str] = []  # the command registers itself with the app; nothing to import


@app.command(short_help="Write a world's evaluation arrays (z, h, h′, ρ) as an .npz.")
@cli_errors
@option_flags("options", EMBED)
@encoder_flags
def embed(
    target: Path = EncoderArg,
    options: dict = None,  # embed's own options (core/options.EMBED)
    encoder: dict = None,  # the encoder flags (core/options.ENCODER)
) -> None:
    """Embed a world's evaluation set with any encoder and write the arrays (z, h, h′, ρ)
    as an .npz: what audit would measure, to look at, store, compare (`idaudit consistency`)
    or audit later (`idaudit audit OUT.npz` gives the same numbers). Options as audit's."""
    from idaudit.core.requests import EmbedRequest
    from idaudit.evaluations.pipeline import check_embed_outputs, run_embed

    check_seed(options["seed"])
    out_path = options["out"]
    check_embed_outputs(target, out_path, encoder)  # a stale file gone even if an option is bad
    inp = run_embed(EmbedRequest.from_options(target=target, **options, **encoder))
    pairs = "" if inp.h_prime is None else f", h_prime (ρ = {inp.rho:g})"
    out.print(f"wrote {out_path}: z {tuple(inp.z.shape)}, h {tuple(inp.h.shape)}{pairs}",
              highlight=False)
