"""The audit's metrics as plain functions of arrays (NumPy arrays or torch tensors).

Each function is a thin call to the ``idaudit.maths`` function the audit composes, so its
number is the one :func:`audit_metrics` (and ``idaudit audit``) reports for the same rows, up
to floating-point rounding (the audit reads every linear fit from one shifted pass of moments;
the values agree to about 1e-15). Arrays are rows × columns: ``z`` the true latents (n × N),
``h`` the embeddings (n × m), ``h_prime`` the embeddings of the OU partners z′ of z, ``rho`` the
OU correlation. NumPy and SciPy only: importing this module does not import torch.

Example:
    >>> import numpy as np
    >>> from idaudit.metrics import audit_metrics, r2
    >>> rng = np.random.default_rng(0)
    >>> z = rng.standard_normal((500, 2))
    >>> h = z @ np.array([[0.0, 1.0], [-1.0, 0.0]]) + 0.1 * rng.standard_normal((500, 2))
    >>> abs(r2(z, h) - audit_metrics(z, h, gauss_slices=0)["r2_h_to_z"]) < 1e-12
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from idaudit.maths import bounds as _bounds
from idaudit.maths import gaussianity as _gaussianity
from idaudit.maths import linear as _linear
from idaudit.maths.linear import ArrayLike
from idaudit.maths.metrics import audit_metrics

__all__ = ["audit_metrics", "bound", "delta", "epsilon", "gaussianity", "mcc", "orthogonality",
           "per_dim_r2", "procrustes", "r2", "standardize"]


def r2(z: ArrayLike, h: ArrayLike) -> float:
    """Linear R² of the latents z from the embeddings h, in-sample: R²(h → z).

    Note the order: the target ``z`` comes first, the regressors ``h`` second (it calls
    ``idaudit.maths.linear.linear_r2(h, z)``, whose arguments are (regressors, target)).
    The least-squares fit z ≈ W h + c, its R² averaged uniformly over the columns of z, as
    scikit-learn's ``LinearRegression().fit(h, z).score(h, z)``; a constant column of z
    scores 0. The audit's key: ``r2_h_to_z``.

    Args:
        z: the latents, shape (n, N) (a 1-D array is one column).
        h: the embeddings, shape (n, m).

    Returns:
        The mean over z's columns of the in-sample R², a float (1.0 when z is an affine
        function of h).

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> z = rng.standard_normal((500, 2))
        >>> h = z @ np.array([[0.0, 1.0], [-1.0, 0.0]]) + 0.1 * rng.standard_normal((500, 2))
        >>> round(r2(z, h), 2)
        0.99
        >>> round(r2(z, z), 6)
        1.0
    """
    return _linear.linear_r2(h, z)


def per_dim_r2(z: ArrayLike, h: ArrayLike) -> list[float]:
    """Linear R² of each latent from the embeddings, in-sample: R²(h → z_i) for each column i.

    The same fit and argument order as :func:`r2` (target ``z`` first), one R² per column of
    z instead of their mean (``idaudit.maths.linear.per_dim_r2(h, z)``). The audit's key:
    ``r2_h_to_z_per_dim``.

    Args:
        z: the latents, shape (n, N).
        h: the embeddings, shape (n, m).

    Returns:
        A list of N floats, in the order of z's columns.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> z = rng.standard_normal((500, 2))
        >>> h = z[:, :1] + 0.1 * rng.standard_normal((500, 1))  # sees only the first latent
        >>> [round(v, 2) for v in per_dim_r2(z, h)]
        [0.99, 0.0]
    """
    return _linear.per_dim_r2(h, z)


def procrustes(z: ArrayLike, h: ArrayLike, z_white: bool = False) -> float:
    """Procrustes MSE: min over (semi-)orthogonal R of E‖(h − h̄) − R z_s‖², z_s = :func:`standardize` (z).

    How far h is from a rotation of the latents, each latent first scaled to unit variance on
    these rows (their units do not matter), means over the rows
    (``idaudit.maths.linear.procrustes_mse``). For m ≥ N it is tr Σ_hh + N − 2 Σ svals(Σ_hz_s)
    in closed form; for m < N, where R keeps m directions of z, it is found by
    majorisation–minimisation. The audit's key: ``procrustes_mse``.

    Args:
        z: the latents, shape (n, N).
        h: the embeddings, shape (n, m).
        z_white: z's law is white (Cov = I; a world that draws it so): use z − z̄ as it is.

    Returns:
        The minimum mean squared error over rotations, a float ≥ 0 (0 when h is an exact
        rotation of the standardised latents plus a constant).

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> z = rng.standard_normal((500, 2))
        >>> rot = np.array([[0.6, -0.8], [0.8, 0.6]])
        >>> round(procrustes(z, standardize(z) @ rot + 3.0), 6)
        0.0
        >>> round(procrustes(z * [1000.0, 0.01], standardize(z) @ rot), 6)  # units do not matter
        0.0
        >>> # a scaled rotation is no rotation: its error is E‖z_s‖² = N
        >>> round(procrustes(z, 2.0 * standardize(z) @ rot), 6)
        2.0
    """
    return _linear.procrustes_mse(z, h, z_white=z_white)


def standardize(z: ArrayLike) -> np.ndarray:
    """The latents as the audit compares h with them: (z − z̄)/σ, each scaled to unit variance.

    σ is each latent's standard deviation as a mean over the rows. Procrustes, the
    orthogonality of the fitted map and the bound's comparison read these unless z's law is
    white already; R² and MCC do not depend on it.

    Args:
        z: the latents, shape (n, N).

    Returns:
        An (n, N) float64 array whose columns have mean 0 and mean square 1.

    Example:
        >>> import numpy as np
        >>> z = np.random.default_rng(0).standard_normal((400, 2)) * [3.0, 0.1] + 7.0
        >>> s = standardize(z)
        >>> np.allclose((s * s).mean(0), 1.0) and np.allclose(s.mean(0), 0.0)
        True
    """
    return _linear.standardize(z)


def orthogonality(q: ArrayLike) -> float:
    """Orthogonality error ‖QᵀQ − I‖_F / √N of a linear map Q of shape (m, N).

    0 for a map with orthonormal columns (a rotation). The audit applies it to Q̂, the
    least-squares map h ≈ Q̂ z_s + c from the standardised latents (:func:`standardize`), which
    ``idaudit.maths.linear.fit_linear_map(standardize(z), h)`` returns first
    (``idaudit.maths.linear.orthogonality_error``). The audit's key: ``orthogonality_error``.

    Args:
        q: the map, shape (m, N): a NumPy array or a torch tensor.

    Returns:
        The Frobenius norm of QᵀQ − I divided by √N, a float ≥ 0.

    Example:
        >>> import numpy as np
        >>> round(orthogonality(np.array([[0.6, -0.8], [0.8, 0.6]])), 6)
        0.0
        >>> round(orthogonality(2.0 * np.eye(2)), 3)  # QᵀQ − I = 3I: ‖3I‖_F / √2 = 3
        3.0
    """
    return _linear.orthogonality_error(q)


def mcc(z: ArrayLike, h: ArrayLike) -> float:
    """Mean correlation coefficient: the mean |Pearson correlation| of z's and h's columns
    matched one to one (Hungarian matching, ``idaudit.maths.linear.mcc``).

    1 when h is z up to a permutation, signs and scales of its columns; unlike R² it is not
    rotation invariant (a rotated z scores below 1). The audit's key: ``mcc``.

    Args:
        z: the latents, shape (n, N).
        h: the embeddings, shape (n, m).

    Returns:
        The mean absolute correlation over the min(N, m) matched pairs, a float in [0, 1].

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> z = rng.standard_normal((500, 3))
        >>> round(mcc(z, -2.0 * z[:, [2, 0, 1]]), 6)  # permuted, sign-flipped, scaled
        1.0
        >>> rot = np.array([[0.6, -0.8, 0.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0]])
        >>> mcc(z, z @ rot) < 0.9
        True
    """
    return _linear.mcc(z, h)


def epsilon(h: ArrayLike) -> float:
    """Whitening error ε = ‖Cov(h) − I‖_F (``idaudit.maths.bounds.whitening_error``).

    The sample covariance (n − 1 in the denominator) against the identity: how far h is from
    an isotropic, unit-variance embedding. A truly white h of n rows shows ε ≈ √(m(m+1)/(n−1))
    by chance (the audit's ``whitening_floor``). The audit's key: ``whitening_error``.

    Args:
        h: the embeddings, shape (n, m).

    Returns:
        ε, a float ≥ 0.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> h = rng.standard_normal((500, 2)) * np.array([1.0, 2.0])
        >>> round(epsilon(h), 2)  # Cov(h) ≈ diag(1, 4): ε ≈ ‖diag(0, 3)‖_F = 3
        2.75
        >>> white = np.linalg.solve(np.linalg.cholesky(np.cov(h.T)), (h - h.mean(0)).T).T
        >>> epsilon(white) < 1e-12  # exactly whitened
        True
    """
    return _bounds.whitening_error(h)


def delta(h: ArrayLike, h_prime: ArrayLike, rho: float) -> float:
    """Alignment gap δ = max(E‖h′ − h‖² − 2(1 − ρ) tr Cov(h), 0)
    (``idaudit.maths.bounds.alignment_gap``).

    How much more the positive pairs' embeddings differ than a linear encoder's would under
    an OU step of correlation ρ: 0 for h = Qz with Q orthogonal (in expectation). The audit's
    key: ``alignment_gap``.

    Args:
        h: the embeddings of z, shape (n, m).
        h_prime: the embeddings of z′, one OU step from z, shape (n, m), row for row.
        rho: the OU correlation ρ of the pairs, in (0, 1).

    Returns:
        δ, a float ≥ 0.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> z = rng.standard_normal((2000, 2))
        >>> z_prime = 0.8 * z + 0.6 * rng.standard_normal((2000, 2))  # ρ = 0.8
        >>> delta(z, z_prime, 0.8) < 0.05  # the identity encoder: 0 up to sampling noise
        True
        >>> delta(z**3, z_prime**3, 0.8) > 1.0  # a nonlinear one
        True
    """
    return _bounds.alignment_gap(h, h_prime, rho)


def bound(epsilon: float, delta: float, rho: float) -> float:
    """The Theorem 3 bound D + (ε + D)² on E‖h − Qz‖², with D = δ / (2ρ(1 − ρ)).

    ``idaudit.maths.bounds.approximate_bound`` returns the pair (D, bound); this returns the
    bound, its second element (D is ``delta / (2 * rho * (1 - rho))``). Given the sample ε and
    δ (:func:`epsilon`, :func:`delta`) it is the audit's plug-in estimate, key ``bound``
    (``D`` the audit's key for D).

    Args:
        epsilon: the whitening error ε = ‖Cov(h) − I‖_F.
        delta: the alignment gap δ.
        rho: the OU correlation ρ, in (0, 1).

    Returns:
        D + (ε + D)², a float.

    Example:
        >>> round(bound(0.1, 0.02, 0.9), 4)  # D = 0.02 / 0.18 = 0.1111
        0.1557
        >>> bound(0.0, 0.0, 0.5)
        0.0
    """
    return _bounds.approximate_bound(epsilon, delta, rho)[1]


def gaussianity(h: ArrayLike, n_slices: int = 64, sims: int = 0, seed: int = 0) -> dict[str, Any]:
    """The sliced Epps–Pulley test that h is Gaussian (any mean and covariance)
    (``idaudit.maths.gaussianity.sliced_gaussianity``).

    h is projected on ``n_slices`` seeded random directions, the projections are whitened
    jointly, and the mean Epps–Pulley statistic over slices is compared with its null law.
    The defaults are the audit's (``gauss_slices=64``, ``gauss_sims=0``, ``seed=0``), so the
    values equal the audit's keys of the same names.

    Args:
        h: the embeddings, shape (n, m).
        n_slices: the number of random directions.
        sims: 0 for the asymptotic p-value (a weighted χ² mixture), else the number of
            simulated Gaussian data sets of the same size for a Monte Carlo p-value.
        seed: the seed of the directions (and of the simulations).

    Returns:
        A dict with ``gaussianity_statistic`` (the statistic, lower is more Gaussian),
        ``gaussianity_p_value``, ``gaussianity_null_mean`` (the statistic's mean under the
        null) and ``gaussianity_method``; the first two are None where h has fewer than 3
        rows or no variance.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> gaussianity(rng.standard_normal((1000, 2)))["gaussianity_p_value"] > 0.01
        True
        >>> gaussianity(rng.uniform(size=(1000, 2)))["gaussianity_p_value"] < 0.01
        True
    """
    return _gaussianity.sliced_gaussianity(h, n_slices=n_slices, sims=sims, seed=seed)
