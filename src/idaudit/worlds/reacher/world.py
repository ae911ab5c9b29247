"""The Reacher pixel world: a dataset-backed World over a rendered dataset directory (its
kind, which makes specs and renders datasets, is in :mod:`idaudit.worlds.reacher.kind`).

Its spec keeps the dataset's own spec (mode, ρ or stride, pairs, evaluation images, the
dataset's seed) and the directory (stored relative to a checkpoint). The dataset's seed is
not a training seed: one dataset serves every training seed.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from idaudit.core.errors import IdauditError, require
from idaudit.core.memory import check_memory
from idaudit.worlds.base import (
    EpochPairs,
    EvalSet,
    Pairs,
    PlanSet,
    World,
    stored_pairs,
    two_views,
)
from idaudit.worlds.dataset import relative_path
from idaudit.worlds.reacher.data import EVAL_SEED, ReacherData, ReacherSpec, load_dataset
from idaudit.worlds.spec import WorldSpec

__all__ = ["NAME", "ReacherWorld", "dataset_of"]

NAME = "reacher"
N_FIT = 10_000  # training images the audit's linear maps are fitted on
PLAN_INSIDE = 2.5  # plan between gallery images whose angles all lie within ±2.5

def dataset_of(spec: WorldSpec) -> ReacherSpec:
    """The dataset spec a Reacher world spec holds (``extra.dataset``), checked."""
    if "dataset" not in spec.extra:
        raise IdauditError("the Reacher world spec lacks its dataset description; "
                           "pass --data DIR")
    return ReacherSpec.from_dict(spec.extra["dataset"], f"world {spec.name!r}: extra.dataset")


class ReacherWorld(World):
    """MuJoCo Reacher joint angles (shoulder, wrist) seen as RGB images (64 × 64 by default)."""

    def __init__(self, spec: WorldSpec, root: Path) -> None:
        self.spec = spec
        self.root = Path(root)

    _rspec = staticmethod(dataset_of)  # the dataset spec of a world spec (image size …)

    def spec_for(self, base_dir: Path | None) -> WorldSpec:
        return dataclasses.replace(self.spec, extra={**self.spec.extra,
                                                     "data": relative_path(self.root, base_dir)})

    # ---- the questions ---------------------------------------------------------------

    @cached_property
    def data(self) -> ReacherData:
        return load_dataset(self.root)

    @property
    def rho(self) -> float | None:
        """One ρ only for OU pairs; trajectory pairs differ per joint (see rho_per_dim)."""
        return self.spec.rho if self.spec.source == "gaussian" else None

    @property
    def rho_per_dim(self) -> list[float]:
        if self.rho is not None:
            return [self.rho, self.rho]
        return [float(self.spec.extra["rho_0"]), float(self.spec.extra["rho_1"])]

    @property
    def latent_labels(self) -> tuple[str, ...]:
        return ("shoulder (rad)", "wrist (rad)")

    def eval_set(self, n: int | None, seed: int) -> EvalSet:
        """Fit on (up to) 10 000 training images, score on the shared evaluation images.

        Each row comes with its OU partner x′ and the dataset's ρ (for the label-free signals
        and the bound) when the dataset has one ρ (OU pairs) and holds the evaluation images'
        partners (datasets rendered before them have none: x′ is left out).
        """
        require(n is None, "--n-eval does not apply to the Reacher world: its dataset fixes "
                "the evaluation images (`idaudit world reacher --n-eval N`)")
        d = self.data
        k = min(N_FIT, len(d.z))
        pairs = self.rho is not None and d.x_prime_eval is not None
        size = d.x_eval.shape[1]
        check_memory((2 if pairs else 1) * (k + len(d.z_eval)) * size * size * 3,
                     f"the Reacher evaluation set ({k + len(d.z_eval)} images of {size}×{size})")
        z = torch.from_numpy(np.concatenate([d.z[:k], d.z_eval]))
        x = np.concatenate([d.x[:k], d.x_eval])
        x_prime = np.concatenate([d.x_prime[:k], d.x_prime_eval]) if pairs else None
        # the angles' law, for R²'s ceiling: N(0, I₂) for the fit rows of OU pairs and for the
        # evaluation angles; a trajectory dataset's fit rows follow its controller (no law)
        return EvalSet(z=z, x=x, x_prime=x_prime, rho=self.rho if pairs else None,
                       test_rows=torch.arange(k, k + len(d.z_eval)), circular=self.circular,
                       angle_sigma=1.0 if self.rho is not None else None,
                       z_white=self.rho is not None)  # OU pairs: N(0, I₂) angles

    def eval_set_at(self, image_size: int, n: int, seed: int = EVAL_SEED,
                    cache_dir: str | Path | None = None, workers: int | None = None,
                    progress: bool = False) -> EvalSet:
        """This world's evaluation pairs (its ρ) rendered natively at ``image_size`` px, for
        encoders that expect another size than the dataset's (:func:`reacher_eval_set`)."""
        from idaudit.worlds.reacher.eval_pairs import reacher_eval_set

        require(self.rho is not None, "the Reacher world's trajectory pairs have no single ρ; "
                "an evaluation set at another image size needs an OU dataset (--rho)")
        return reacher_eval_set(self.rho, image_size, n, seed, cache_dir, workers, progress)

    def plan_set(self, pairs: int, gallery: int | None, seed: int) -> PlanSet:
        """The evaluation images are the gallery; starts and goals are drawn from those whose
        angles lie within ±2.5 rad (``gallery`` does not apply: the dataset fixes it)."""
        require(gallery is None, "--gallery does not apply to the Reacher world: its "
                "evaluation images are the gallery")
        size = self._rspec(self.spec).image_size
        check_memory(2 * pairs * size * size * 3,
                     f"drawing {pairs} start/goal pairs of images (--pairs)")
        d = self.data
        z = d.z_eval
        ok = np.flatnonzero((np.abs(z) < PLAN_INSIDE).all(1))
        rng = np.random.default_rng(seed)
        idx = rng.choice(ok, size=(pairs, 2), replace=len(ok) < 2 * pairs)
        zt = torch.from_numpy(z)
        return PlanSet(zt, d.x_eval, zt[idx[:, 0]], d.x_eval[idx[:, 0]], zt[idx[:, 1]],
                       d.x_eval[idx[:, 1]], z_white=self.rho is not None)  # as eval_set's

    def pairs(self, n: int | None = None, seed: int | None = None) -> Pairs:
        """The rendered training pairs (the first ``n``; None: all): images x, x′ as uint8
        (n, S, S, 3) tensors sharing the dataset's memory, the angles z, z′ (radians)."""
        d = self.data
        as_t = torch.from_numpy
        return stored_pairs(Pairs(as_t(d.x), as_t(d.x_prime), as_t(d.z), as_t(d.z_prime)), n,
                            seed, f"the Reacher dataset {self.root}")

    def pair_source(self, views: str, batch: int, gen: torch.Generator, device: torch.device,
                    n_views: int = 2) -> EpochPairs:
        two_views(n_views, "the Reacher world")
        require(views == "pair", "--views anchor needs fresh latents; the Reacher world has "
                "only its rendered (x, x′) pairs")
        return EpochPairs(self.data.x, self.data.x_prime, batch, gen, device)
