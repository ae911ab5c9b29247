"""Time of all audit metrics on 10 000 × 1024 embeddings: idaudit vs straightforward fits.

The straightforward version computes the same quantities directly from the data matrices:
R² both ways and the map Q̂ by least squares on the (intercept-augmented) data, the held-out
R² both ways by least squares on the train rows (five ``torch.linalg.lstsq`` fits), Procrustes
by an SVD of the centred cross-product, ε from ``torch.cov``. idaudit reads every fit off one
pass of moments (``idaudit.maths.metrics.audit_metrics``, bootstrap off; its Gaussianity test with
50 simulations is included). Both run in this process on the same arrays; medians.

Whole process: the same arrays saved as one .npz (z, h, h_prime, rho); ``idaudit audit FILE``
against a fresh Python process that loads the file and runs the straightforward fits (imports
and loading included in both), medians.

    python benchmarks/bench_audit_metrics.py [--n 10000] [--dim 1024] [--dtype float32]
                                             [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from idaudit.maths.metrics import audit_metrics
from idaudit.maths.moments import split_rows


def straightforward(z: torch.Tensor, h: torch.Tensor, hp: torch.Tensor, rho: float) -> dict:
    z, h, hp = z.double(), h.double(), hp.double()
    n = z.shape[0]
    ones = torch.ones(n, 1, dtype=z.dtype)

    def r2(a, b, rows_fit=None, rows_eval=None):
        fa = torch.cat([a, ones], 1)
        fit_rows = slice(None) if rows_fit is None else rows_fit
        ev_rows = slice(None) if rows_eval is None else rows_eval
        w = torch.linalg.lstsq(fa[fit_rows], b[fit_rows]).solution
        pred = fa[ev_rows] @ w
        tgt = b[ev_rows]
        ss_res = (tgt - pred).square().sum(0)
        ss_tot = (tgt - tgt.mean(0)).square().sum(0)
        return float((1 - ss_res / ss_tot).mean()), w

    r2_hz, _ = r2(h, z)
    r2_zh, w = r2(z, h)
    q = torch.linalg.lstsq(torch.cat([z, ones], 1), h).solution[:-1].T
    test, train = split_rows(n, 0.5, 0)
    r2_hz_ho, _ = r2(h, z, train, test)
    r2_zh_ho, _ = r2(z, h, train, test)
    orth = torch.linalg.matrix_norm(q.T @ q - torch.eye(q.shape[1], dtype=q.dtype))
    zc, hc = z - z.mean(0), h - h.mean(0)
    u, s, vt = torch.linalg.svd(zc.T @ hc)
    proc = ((hc - zc @ (u @ vt)).square().sum(1)).mean()
    cov = torch.cov(h.T)
    eps = torch.linalg.matrix_norm(cov - torch.eye(cov.shape[0], dtype=cov.dtype))
    gap = max(float((hp - h).square().sum(1).mean() - 2 * (1 - rho) * torch.trace(cov)), 0.0)
    return {"r2_h_to_z": r2_hz, "r2_z_to_h": r2_zh, "r2_h_to_z_heldout": r2_hz_ho,
            "r2_z_to_h_heldout": r2_zh_ho, "orthogonality_error": float(orth) / q.shape[1] ** 0.5,
            "procrustes_mse": float(proc), "whitening_error": float(eps), "alignment_gap": gap}


def embeddings(n: int, dim: int, dtype=torch.float32
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Latents z, embeddings h = tanh(0.3·zQᵀ)/0.3 + noise (Q orthogonal), and h′ = h + noise."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(n, dim, generator=g)
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g))
    h = torch.tanh(0.3 * z @ q.T) / 0.3 + 0.05 * torch.randn(n, dim, generator=g)
    hp = h + 0.3 * torch.randn(n, dim, generator=g)
    return z.to(dtype), h.to(dtype), hp.to(dtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--base-src", type=Path, default=None,
                    help="also time `idaudit audit` from another checkout's src/ (before → after)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    z, h, hp = embeddings(args.n, args.dim, getattr(torch, args.dtype))

    audit_metrics(z[:500, :8], h[:500, :8], hp[:500, :8], 0.95)  # warm-up (numba cache, BLAS)
    t_fast, t_ref = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        fast = audit_metrics(z, h, hp, 0.95)
        t_fast.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ref = straightforward(z, h, hp, 0.95)
        t_ref.append(time.perf_counter() - t0)
    print(f"{args.n} × {args.dim} {args.dtype} embeddings, 2 threads, median of {args.repeats}:")
    print(f"  straightforward (5 lstsq + SVD): {statistics.median(t_ref):6.2f} s")
    print(f"  idaudit audit_metrics:           {statistics.median(t_fast):6.2f} s  "
          f"(all metrics, asymptotic Gaussianity p-value)")
    print(f"  speed-up: {statistics.median(t_ref) / statistics.median(t_fast):.1f}x")
    print("  agreement:")
    for key, v in ref.items():
        print(f"    {key:22s} {v: .8f}  {fast[key]: .8f}  |Δ| = {abs(v - fast[key]):.1e}")
    whole_process(z, h, hp, args.repeats, args.base_src)


CHILD = """
import sys, numpy as np, torch
sys.path.insert(0, sys.argv[2])
torch.set_num_threads(2)
from bench_audit_metrics import straightforward
d = np.load(sys.argv[1])
straightforward(torch.from_numpy(d["z"]), torch.from_numpy(d["h"]), torch.from_numpy(d["h_prime"]),
                float(d["rho"]))
"""


def _time_cli(path: Path, out: Path, src: Path | None) -> float:
    env = None if src is None else {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "idaudit.cli", "audit", str(path), "--json",
                          str(out)], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(f"idaudit audit failed: {res.stderr.strip()}")
    return time.perf_counter() - t0


def whole_process(z: torch.Tensor, h: torch.Tensor, hp: torch.Tensor, repeats: int,
                  base_src: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "arrays.npz"
        np.savez(path, z=z.numpy(), h=h.numpy(), h_prime=hp.numpy(), rho=np.array(0.95))
        t_cli, t_ref, t_base = [], [], []
        for _ in range(repeats):
            t_cli.append(_time_cli(path, Path(tmp) / "a.json", None))
            if base_src is not None:
                t_base.append(_time_cli(path, Path(tmp) / "b.json", base_src))
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", CHILD, str(path), str(Path(__file__).parent)],
                           check=True)
            t_ref.append(time.perf_counter() - t0)
    print(f"whole process (imports, loading the .npz, every metric), median of {repeats}:")
    print(f"  straightforward in a fresh process: {statistics.median(t_ref):6.2f} s")
    print(f"  idaudit audit FILE:                 {statistics.median(t_cli):6.2f} s  "
          f"({statistics.median(t_ref) / statistics.median(t_cli):.1f}x)")
    if t_base:
        print(f"  idaudit audit FILE from {base_src}: {statistics.median(t_base):6.2f} s  "
              f"(this checkout {statistics.median(t_base) / statistics.median(t_cli):.1f}x "
              "faster)")


if __name__ == "__main__":
    main()
