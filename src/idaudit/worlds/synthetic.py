"""Synthetic worlds: a unit-variance source law, the OU channel and a mixing x = g(z).

Pairs are generated online; ``idaudit world NAME`` writes them to a safetensors file
(z, z′, x, x′ and the spec in its metadata) that :mod:`idaudit.worlds.dataset` reads back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import torch

from idaudit.core.atomic import atomic_write
from idaudit.core.defaults import WORLD_DEFAULTS
from idaudit.core.errors import IdauditError, require
from idaudit.core.limits import check
from idaudit.core.memory import check_memory
from idaudit.core.metadata import PAIRS_FORMAT
from idaudit.core.registered import WORLDS
from idaudit.worlds.base import EvalSet, Pairs, PlanSet, World
from idaudit.worlds.kind import WorldKind
from idaudit.worlds.mixings import MIXINGS, CouplingMixing
from idaudit.worlds.sources import SOURCES, ou_step, sample_source
from idaudit.worlds.spec import WorldSpec, check_type

__all__ = ["PAIRS_FORMAT", "PAIRS_FORMAT_VERSION", "SYNTHETIC", "SYNTHETIC_WORLDS", "SyntheticKind",
           "SyntheticWorld", "save_pairs"]

#: idaudit's own synthetic worlds: the names core/registered.py declares with this module's kind
SYNTHETIC_WORLDS = tuple(n for n in WORLDS.builtin()
                         if WORLDS.target(n) == f"{__name__}:SYNTHETIC")
TWO_D = ("spiral", "banana", "sinusoid", "nvp")
COUPLING = ("nvp", "coupling")
PAIRS_FORMAT_VERSION = 1


def check_mixing_memory(name: str, dim: int) -> None:
    """Refuse a coupling dimension whose mixing weights cannot be made here: each layer's
    (N/2)² orthogonal matrix is drawn by a float64 QR that holds about three such matrices."""
    check_memory(3 * 8 * (dim // 2) ** 2, f"--dim {dim} is too large for world {name!r}: its "
                 "mixing")


BYTES = 4  # float32 tensors


class SyntheticWorld(World):
    """A synthetic world: latent law + OU channel + observation map g."""

    def __init__(self, spec: WorldSpec) -> None:
        self.spec = spec
        if spec.name in COUPLING:
            self._mix = CouplingMixing(spec.dim, spec.layers or 4, seed=spec.mixing_seed)
        else:
            self._mix = MIXINGS.get(spec.name)

    # ---- sampling --------------------------------------------------------------------

    def sample_latents(self, n: int, gen: torch.Generator) -> torch.Tensor:
        return sample_source(self.spec.source, (n, self.spec.dim), gen, self.spec.alpha)

    def transition(self, z: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """z′ from the OU channel, the noise drawn from the source law."""
        return ou_step(z, self.spec.rho, self.sample_latents(z.shape[0], gen))

    def sample_pairs(self, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.sample_latents(n, gen)
        return z, self.transition(z, gen)

    def sample_views(self, n: int, gen: torch.Generator, scheme: str = "anchor",
                     n_views: int = 2) -> tuple[torch.Tensor, ...]:
        """``n_views`` views of a batch for training.

        ``anchor`` (the paper's code): every view is one OU step from a shared anchor z, so
        any two views form an OU pair with correlation ρ². ``pair``: the views are (z, z′),
        two only.
        """
        if scheme == "pair":
            _two_views_of_a_pair(n_views)
            return self.sample_pairs(n, gen)
        if scheme != "anchor":
            raise IdauditError(f"unknown view scheme {scheme!r}; valid: anchor, pair")
        z = self.sample_latents(n, gen)
        return tuple(self.transition(z, gen) for _ in range(n_views))

    def observe(self, z: torch.Tensor) -> torch.Tensor:
        return self._mix(z)

    # ---- the interface ---------------------------------------------------------------

    def check_rows(self, rows: int, per_row: int, what: str) -> None:
        """Refuse ``rows`` rows of ``per_row`` float32 vectors of this world's dimension that
        would not fit in memory (``what`` says what they are)."""
        check_memory(rows * per_row * self.spec.dim * BYTES,
                     f"{what} of world {self.spec.name!r} (N = {self.spec.dim})")

    def eval_set(self, n: int | None, seed: int) -> EvalSet:
        n = WORLD_DEFAULTS["n_eval"] if n is None else n
        # z, z′, x, x′, sampling temporaries, then the embeddings h, h′ and the metrics' blocks
        self.check_rows(n, 12, f"an evaluation set of {n} pairs (--n-eval)")
        gen = torch.Generator().manual_seed(10_007 * seed + 99_991)
        z, zp = self.sample_pairs(n, gen)
        x = self.observe(z)
        return EvalSet(z=z, x=x, x_prime=self.observe(zp), rho=self.rho, circular=self.circular,
                       z_white=True, baseline=x)

    def plan_set(self, pairs: int, gallery: int | None, seed: int) -> PlanSet:
        gallery = WORLD_DEFAULTS["gallery"] if gallery is None else gallery
        self.check_rows(gallery, 4, f"a planning gallery of {gallery} latents (--gallery)")
        self.check_rows(pairs, 8, f"drawing {pairs} start/goal pairs (--pairs)")
        gen = torch.Generator().manual_seed(seed)
        gz = self.sample_latents(gallery, gen)
        sz, ez = self.sample_latents(pairs, gen), self.sample_latents(pairs, gen)
        return PlanSet(gz, self.observe(gz), sz, self.observe(sz), ez, self.observe(ez),
                       z_white=True)

    def pairs(self, n: int | None = None, seed: int | None = None) -> Pairs:
        """``n`` fresh pairs (default: as many as ``idaudit world`` writes) from ``seed``
        (default 0): z from the source law, z′ one OU step on, both observed."""
        from idaudit.core.requests import WorldRequest

        n = WorldRequest.pairs if n is None else n
        require(isinstance(n, int) and n >= 1, f"n must be a positive number of pairs, got {n!r}")
        self.check_rows(n, 8, f"{n} pairs")
        gen = torch.Generator().manual_seed(0 if seed is None else seed)
        z, zp = self.sample_pairs(n, gen)
        return Pairs(self.observe(z), self.observe(zp), z, zp)

    def pair_source(self, views: str, batch: int, gen: torch.Generator, device: torch.device,
                    n_views: int = 2) -> OnlinePairs:
        self.check_rows(batch, 6 * n_views, f"a training batch of {batch} × {n_views} views "
                        "(--batch, --n-views)")
        if views == "pair":
            _two_views_of_a_pair(n_views)
        return OnlinePairs(self, views, batch, gen, device, n_views)


def _two_views_of_a_pair(n_views: int) -> None:
    require(n_views == 2, f"--n-views {n_views} needs --views anchor: a pair (z, z′) has two "
            "views")


class OnlinePairs:
    """Fresh views every step: sample, then observe all views in one call."""

    steps_per_epoch = None

    def __init__(self, world: SyntheticWorld, views: str, b: int, gen: torch.Generator,
                 device: torch.device, n_views: int = 2) -> None:
        self.world, self.views, self.b, self.gen, self.device = world, views, b, gen, device
        self.n_views = n_views

    def batch(self) -> torch.Tensor:
        views = self.world.sample_views(self.b, self.gen, self.views, self.n_views)
        return self.world.observe(torch.cat(views)).to(self.device, non_blocking=True)


class SyntheticKind(WorldKind):
    """The synthetic worlds' kind: generated online, written as a pairs file."""

    world = SyntheticWorld
    options: ClassVar[frozenset[str]] = frozenset(
        {"dim", "source", "alpha", "rho", "layers", "mixing_seed"})
    refuses: ClassVar[frozenset[str]] = frozenset({"epochs"})

    def make_spec(self, name: str, options: dict[str, Any]) -> WorldSpec:
        dim, source = options.get("dim"), options.get("source", WORLD_DEFAULTS["source"])
        alpha, layers = options.get("alpha"), options.get("layers")
        rho = options.get("rho", WORLD_DEFAULTS["rho"])
        for key, kind in (("dim", "integer"), ("source", "string"), ("alpha", "number"),
                          ("rho", "number"), ("layers", "integer"), ("mixing_seed", "integer")):
            check_type(options.get(key), kind, "--" + key.replace("_", "-"), optional=True)
        SOURCES.get(source)  # raises with the valid names
        check("rho", rho)
        if source == "gennorm":
            require(alpha is not None, "--alpha is required with --source gennorm")
        if alpha is not None:
            check("alpha", alpha)
            require(source == "gennorm", "--alpha only applies to --source gennorm")
        if name in TWO_D:
            require(dim in (None, 2), f"world {name!r} is two-dimensional; got --dim {dim}")
            dim = 2
        else:
            dim = WORLD_DEFAULTS["dim"] if dim is None else dim
            require(dim >= 2 and dim % 2 == 0,
                    f"--dim must be an even number ≥ 2 for coupling, got {dim}")
        if name in COUPLING:
            layers = WORLD_DEFAULTS["layers"] if layers is None else layers
            check("layers", layers)
            check_mixing_memory(name, dim)
        else:
            require(layers is None, f"--layers only applies to coupling worlds, not {name!r}")
            require(options.get("mixing_seed") is None,
                    f"--mixing-seed only applies to coupling worlds, not {name!r}")
        return WorldSpec(name=name, dim=dim, source=source, alpha=alpha, rho=float(rho),
                         layers=layers, mixing_seed=int(options.get("mixing_seed",
                                                                  WORLD_DEFAULTS["mixing_seed"])))

    def check_spec(self, spec: WorldSpec) -> WorldSpec:
        super().check_spec(spec)
        fields = {"dim": spec.dim, "source": spec.source, "alpha": spec.alpha, "rho": spec.rho,
                  "layers": spec.layers, "mixing_seed": spec.mixing_seed}
        if not isinstance(spec.source, str):
            raise IdauditError(f"source must be a name, got {spec.source!r}")
        for key in ("layers", "mixing_seed"):
            if fields[key] is not None and not isinstance(fields[key], int):
                raise IdauditError(f"{key} must be an integer, got {fields[key]!r}")
        if spec.name not in COUPLING:  # not an option there: the default is what it holds
            fields["mixing_seed"] = None
        remade = self.make_spec(spec.name, {k: v for k, v in fields.items() if v is not None})
        if remade != spec:
            raise IdauditError(f"the spec does not describe a valid {spec.name!r} world")
        return spec

    def write(self, spec: WorldSpec, out: Path, pairs: int, seed: int, workers: int | None,
              progress: bool = False) -> str:
        require(workers is None, f"--workers does not apply to world {spec.name!r}")
        path = save_pairs(out, SyntheticWorld(spec), pairs, seed)
        return (f"wrote {pairs} pairs of {spec.name} (N={spec.dim}, {spec.source}, "
                f"ρ={spec.rho}) to {path}")

    def default_encoder(self, world: World | WorldSpec) -> tuple[str, dict[str, Any]]:
        spec = world.spec if isinstance(world, World) else world
        if spec.name in COUPLING:
            return "coupling", {"dim": spec.dim, "layers": spec.layers}
        return "mlp", {"in_dim": spec.dim, "out_dim": spec.dim}


SYNTHETIC = SyntheticKind()  # the kind of every name of SYNTHETIC_WORLDS


def save_pairs(path: str | Path, world: SyntheticWorld, n: int, seed: int) -> Path:
    """Sample n pairs (z, z′ = OU(z)) and their observations; write them atomically."""
    from safetensors.torch import save_file

    world.check_rows(n, 8, f"writing {n} pairs (--pairs)")  # z, z′, x, x′ and the sampling's
    gen = torch.Generator().manual_seed(seed)
    z, zp = world.sample_pairs(n, gen)
    tensors = {"z": z, "z_prime": zp, "x": world.observe(z), "x_prime": world.observe(zp)}
    meta = {"format": PAIRS_FORMAT, "format_version": str(PAIRS_FORMAT_VERSION),
            "world": json.dumps(world.spec.to_dict()), "seed": str(seed), "pairs": str(n)}
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    return atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=meta))
