"""The paper's published numbers, which the sweep tables print beside idaudit's, as (mean, std)
pairs: Table 1 (the coupling world's scaling in N, 5 seeds) and Table 2 (Reacher: 5 seeds, a
GPU, 100 000 pairs × 100 epochs, 64 px)."""

from __future__ import annotations

__all__ = ["OU_TABLE_2", "TABLE_1", "TABLE_1_RUNS", "TRAJECTORY_TABLE_2"]

#: coupling mixing, by latent dimension N: the raw mixing's R²(x → z) ("mixing") and R²(h → z)
#: of SIGReg ("lejepa"), the whitening form the paper calls VICReg ("whiten") and InfoNCE at
#: σ = 1 ("infonce"); 20 000 steps. TABLE_1_RUNS: the run options its rows were measured with
#: (a sweep's runs that have them are printed beside it)
TABLE_1_RUNS = {"world": "coupling", "rho": 0.95}
TABLE_1: dict[int, dict[str, tuple[float, float]]] = {
    n: {"mixing": mix, "lejepa": sig, "whiten": vic, "infonce": nce}
    for n, mix, sig, vic, nce in (
        (2, (0.781, 2.1e-3), (0.999998, 3.4e-7), (0.999996, 8.4e-7), (0.950961, 1.6e-3)),
        (4, (0.727, 24e-3), (0.999996, 12e-7), (0.999987, 54e-7), (0.910871, 8.2e-3)),
        (8, (0.728, 10e-3), (0.999993, 9.0e-7), (0.999988, 4.8e-7), (0.886818, 42e-3)),
        (16, (0.734, 6.3e-3), (0.999988, 4.9e-7), (0.999987, 4.6e-7), (0.999880, 0.01e-3)),
        (32, (0.737, 2.3e-3), (0.999981, 7.2e-7), (0.999981, 9.4e-7), (0.907809, 26e-3)),
        (64, (0.737, 1.5e-3), (0.999966, 7.4e-7), (0.999968, 8.1e-7), (0.648496, 3.1e-3)),
        (128, (0.739, 0.61e-3), (0.999938, 3.2e-7), (0.999942, 7.2e-7), (0.566955, 6.6e-3)),
        (256, (0.742, 0.49e-3), (0.999884, 7.9e-7), (0.999889, 7.2e-7), (0.696587, 0.49e-3)),
        (512, (0.749, 0.30e-3), (0.999775, 6.7e-7), (0.999785, 6.9e-7), (0.704393, 0.26e-3)),
        (1024, (0.763, 0.17e-3), (0.999561, 12e-7), (0.999582, 11e-7), (0.720241, 0.20e-3)))
}

#: OU pairs, by ρ: R²(z → h) and R²(h → z) (the paper prints the same value for both)
OU_TABLE_2: dict[float, dict[str, tuple[float, float]]] = {
    rho: {"r2_z_to_h": (r2, sd), "r2_h_to_z": (r2, sd)}
    for rho, r2, sd in ((0.3, 0.67, 2e-2), (0.5, 0.86, 1e-2), (0.7, 0.93, 7e-3),
                        (0.8, 0.94, 3e-4), (0.9, 0.95, 7e-4), (0.95, 0.95, 2e-4),
                        (0.99, 0.95, 4e-4))
}

#: trajectory pairs of a SAC policy, by stride δ: each joint's autocorrelation ρ₀, ρ₁ at δ,
#: R²(z → h) and R²(h → z_i) per joint
TRAJECTORY_TABLE_2: dict[int, dict[str, tuple[float, float]]] = {
    stride: {"rho_0": (rho0, 0.0), "rho_1": (rho1, 0.0), "r2_z_to_h": zh,
             "r2_h_to_z0": h0, "r2_h_to_z1": h1}
    for stride, rho0, rho1, zh, h0, h1 in (
        (1, 1.000, 0.999, (-0.39, 1e-1), (0.71, 3e-2), (-0.03, 4e-2)),
        (2, 0.999, 0.996, (-0.47, 5e-2), (0.73, 4e-3), (0.01, 2e-3)),
        (4, 0.997, 0.991, (-0.05, 3e-1), (0.51, 1e-1), (0.43, 9e-2)),
        (8, 0.992, 0.982, (0.50, 2e-2), (0.80, 2e-3), (0.78, 6e-3)),
        (16, 0.981, 0.963, (0.44, 4e-2), (0.63, 2e-2), (0.87, 2e-2)),
        (32, 0.959, 0.928, (0.45, 6e-2), (0.62, 2e-2), (0.81, 1e-2)),
        (64, 0.915, 0.863, (0.44, 4e-2), (0.55, 3e-2), (0.77, 2e-2)))
}
