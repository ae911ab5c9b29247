"""The paper's published Reacher numbers (its Table 2: 5 seeds, a GPU, 100 000 pairs × 100
epochs, 64 px), which the sweep tables print beside idaudit's: (mean, std) pairs."""

from __future__ import annotations

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
