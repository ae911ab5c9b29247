"""Worlds: unit-variance sources, the OU channel, mixings, and the theory checked numerically."""

import math

import numpy as np
import pytest
import torch
from numpy.polynomial.hermite_e import hermeval

from idaudit.core.errors import IdauditError
from idaudit.worlds import KINDS, CouplingMixing, build_world, make_spec, ou_step, sample_source
from idaudit.worlds.mixings import banana, coupling_parity, coupling_step, sinusoid, spiral

SOURCES = [("gaussian", None), ("laplace", None), ("gennorm", 0.5), ("gennorm", 1.0),
           ("gennorm", 2.0), ("gennorm", 8.0)]


@pytest.mark.parametrize("source,alpha", SOURCES)
def test_ou_channel_keeps_unit_variance(source, alpha):
    g = torch.Generator().manual_seed(0)
    n = 200_000
    z = sample_source(source, (n, 2), g, alpha).double()
    zp = ou_step(z, 0.8, sample_source(source, (n, 2), g, alpha).double())
    tol = 0.03 if (alpha or 2.0) >= 1.0 else 0.08
    assert z.var(0).numpy() == pytest.approx([1.0, 1.0], abs=tol)
    assert zp.var(0).numpy() == pytest.approx([1.0, 1.0], abs=tol)
    assert z.mean(0).abs().max().item() < 0.02
    corr = ((z - z.mean(0)) * (zp - zp.mean(0))).mean(0) / (z.std(0) * zp.std(0))
    assert corr.numpy() == pytest.approx([0.8, 0.8], abs=0.01)


def test_source_shapes_have_the_right_kurtosis():
    g = torch.Generator().manual_seed(1)
    n = 400_000

    def kurt(x):
        x = x.double().flatten()
        return float(((x - x.mean()) ** 4).mean() / x.var() ** 2)

    assert kurt(sample_source("gaussian", (n,), g)) == pytest.approx(3.0, abs=0.1)
    assert kurt(sample_source("laplace", (n,), g)) == pytest.approx(6.0, abs=0.3)
    assert kurt(sample_source("gennorm", (n,), g, 2.0)) == pytest.approx(3.0, abs=0.1)
    assert kurt(sample_source("gennorm", (n,), g, 1.0)) == pytest.approx(6.0, abs=0.3)
    assert kurt(sample_source("gennorm", (n,), g, 16.0)) == pytest.approx(1.8, abs=0.1)


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_hermite_eigenfunctions_of_the_ou_channel(d):
    """E[He_d(z′) He_d(z)] = d!·ρ^d under the Gaussian OU channel (Mehler)."""
    rng = np.random.default_rng(d)
    rho, n = 0.7, 2_000_000
    z = rng.standard_normal(n)
    zp = rho * z + math.sqrt(1 - rho**2) * rng.standard_normal(n)
    coef = np.zeros(d + 1)
    coef[d] = 1.0
    value = np.mean(hermeval(zp, coef) * hermeval(z, coef))
    expected = math.factorial(d) * rho**d
    assert value == pytest.approx(expected, rel=0.03)


def test_whitened_polynomial_features_correlate_at_most_rho():
    """Among whitened polynomial features of z, the positive-pair correlation is ≤ ρ,
    with equality only along the linear feature (Theorem 1's spectral argument)."""
    rng = np.random.default_rng(5)
    rho, n = 0.8, 1_000_000
    z = rng.standard_normal(n)
    zp = rho * z + math.sqrt(1 - rho**2) * rng.standard_normal(n)

    def feats(v):
        return np.stack([v, v**2, v**3, v**4], 1)

    f, fp = feats(z), feats(zp)
    mu = f.mean(0)
    cov = np.cov(f.T)
    w = np.linalg.inv(np.linalg.cholesky(cov))  # whitening: Cov(w f) = I
    a, b = (f - mu) @ w.T, (fp - mu) @ w.T
    cross = (a.T @ b) / n
    cross = 0.5 * (cross + cross.T)
    evals, evecs = np.linalg.eigh(cross)
    assert evals[-1] == pytest.approx(rho, abs=0.01)
    assert evals[-2] == pytest.approx(rho**2, abs=0.015)
    # the top direction is the linear feature: in the raw basis it loads on v (and v³ ≈ 0)
    top = w.T @ evecs[:, -1]
    top = top / np.abs(top).max()
    assert abs(top[0]) == pytest.approx(1.0, abs=1e-6)
    assert np.abs(top[1:]).max() < 0.05
    # every random nonlinear whitened combination correlates strictly less than ρ
    for _ in range(20):
        c = rng.standard_normal(4)
        c[0] = 0.0
        c /= np.linalg.norm(c)
        assert c @ cross @ c < rho - 0.1


def _coupling_inverse(mix: CouplingMixing, x: torch.Tensor) -> torch.Tensor:
    """g⁻¹ of an additive coupling: each layer undone in reverse order (v ← v − tanh(W u))."""
    z = x
    for i in reversed(range(mix.layers)):
        z = coupling_step(z, -mix.weights[i].to(z.device, z.dtype), None, coupling_parity(i))
    return z


def test_mixings_geometry():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(1000, 2, generator=g, dtype=torch.float64)
    torch.testing.assert_close(spiral(z).norm(dim=1), z.norm(dim=1))
    for fn in (spiral, banana, sinusoid):
        jac = torch.autograd.functional.jacobian(lambda v, fn=fn: fn(v.unsqueeze(0))[0], z[3])
        assert torch.linalg.det(jac).item() == pytest.approx(1.0, abs=1e-9)
    for dim, layers in [(2, 8), (6, 4), (64, 4)]:
        mix = CouplingMixing(dim, layers, seed=0)
        zz = torch.randn(200, dim, generator=g)
        torch.testing.assert_close(_coupling_inverse(mix, mix(zz)), zz, rtol=1e-5, atol=1e-5)
        w = mix.weights[0]
        half = dim // 2
        torch.testing.assert_close(w @ w.T, 4.0 * torch.eye(half), rtol=1e-5, atol=1e-5)


def test_coupling_chain_equals_the_layer_by_layer_formula():
    """The chain (halves carried apart) computes v ← v + tanh(W u + c) layer by layer, as
    written with explicit slices: the mixing, the matched encoder, and their gradients."""
    from idaudit.models.encoders import InverseCoupling

    def by_layer(x, weights, biases, parities):
        for w, c, parity in zip(weights, biases, parities):
            half = x.shape[-1] // 2
            a, b = x[:, :half], x[:, half:]
            if parity == 0:
                x = torch.cat([a, b + torch.tanh(a @ w.T + (0 if c is None else c))], 1)
            else:
                x = torch.cat([a + torch.tanh(b @ w.T + (0 if c is None else c)), b], 1)
        return x

    g = torch.Generator().manual_seed(3)
    for dim in (2, 8, 64):
        mix = CouplingMixing(dim, layers=5, seed=1)
        z = torch.randn(200, dim, generator=g)
        want = by_layer(z, mix.weights, [None] * 5, [coupling_parity(i) for i in range(5)])
        torch.testing.assert_close(mix(z), want, rtol=1e-5, atol=1e-5)
        torch.manual_seed(dim)
        enc = InverseCoupling(dim, layers=3)
        x = torch.randn(50, dim, generator=g)
        got = enc(x)
        ref = by_layer(x, [lin.weight for lin in enc.layers], [lin.bias for lin in enc.layers],
                       enc.parities)
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
        grads = torch.autograd.grad(got.square().sum(), list(enc.parameters()))
        want_grads = torch.autograd.grad(ref.square().sum(), list(enc.parameters()))
        for a, b in zip(grads, want_grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # a chain undone layer by layer in reverse returns its input (the encoder's premise)
    mix = CouplingMixing(16, seed=2)
    z = torch.randn(100, 16, generator=g, dtype=torch.float64)
    torch.testing.assert_close(_coupling_inverse(mix, mix(z.float()).double()), z,
                               rtol=1e-4, atol=1e-4)


def test_coupling_mixing_difficulty_matches_the_paper():
    """R²(x → z) of the coupling mixing is ≈ 0.73–0.78 at every N (paper, Table 1)."""
    from idaudit.maths.linear import linear_r2

    g = torch.Generator().manual_seed(0)
    for dim in (2, 8, 64):
        w = build_world(make_spec("coupling", dim=dim))
        z = w.sample_latents(10_000, g)
        assert 0.72 < linear_r2(w.observe(z), z) < 0.79


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(name="moon"), "valid: spiral, banana"),
    (dict(name="spiral", rho=1.0), "rho must"),
    (dict(name="spiral", rho=0.0), "rho must"),
    (dict(name="spiral", rho=float("nan")), "rho must"),
    (dict(name="coupling", dim=3), "even"),
    (dict(name="spiral", source="gennorm", alpha=0.0), "alpha must"),
    (dict(name="spiral", source="gennorm", alpha=-1.0), "alpha must"),
    (dict(name="spiral", source="gennorm"), "alpha is required"),
    (dict(name="spiral", source="cauchy"), "valid: gaussian, gennorm, laplace"),
    (dict(name="banana", dim=4), "two-dimensional"),
])
def test_bad_world_specs(kwargs, fragment):
    with pytest.raises(IdauditError) as exc:
        make_spec(**kwargs)
    assert fragment in str(exc.value)
    assert exc.value.exit_code == 2


def test_world_defaults():
    assert make_spec("nvp").layers == 4
    assert make_spec("nvp", layers=8).layers == 8
    assert make_spec("coupling", dim=16).layers == 4
    nvp = make_spec("nvp", layers=8)
    assert KINDS.get("nvp").default_encoder(nvp) == ("coupling", {"dim": 2, "layers": 8})
    assert KINDS.get("nvp").default_encoder(build_world(nvp)) == ("coupling", {"dim": 2, "layers": 8})
    assert KINDS.get("spiral").default_encoder(make_spec("spiral")) == (
        "mlp", {"in_dim": 2, "out_dim": 2})


def test_anchor_views_are_an_ou_pair_with_rho_squared():
    w = build_world(make_spec("coupling", dim=2, rho=0.9))
    g = torch.Generator().manual_seed(3)
    a, b = w.sample_views(200_000, g, "anchor")
    corr = float(torch.corrcoef(torch.stack([a[:, 0], b[:, 0]]))[0, 1])
    assert corr == pytest.approx(0.81, abs=0.01)
    assert a.var(0).numpy() == pytest.approx([1.0, 1.0], abs=0.02)
    z, zp = w.sample_views(200_000, g, "pair")
    assert float(torch.corrcoef(torch.stack([z[:, 1], zp[:, 1]]))[0, 1]) == pytest.approx(0.9, abs=0.01)
    with pytest.raises(IdauditError):
        w.sample_views(10, g, "triple")


def test_every_world_name_has_a_kind_that_builds_its_world():
    from idaudit.worlds import SYNTHETIC_WORLDS, SyntheticWorld

    kinds = {n: type(KINDS.get(n)).__name__ for n in KINDS.names()}
    assert {n: k for n, k in kinds.items() if n not in SYNTHETIC_WORLDS} == {
        "pairs": "PairsKind", "reacher": "ReacherKind", "recorded": "RecordedKind"}
    assert {kinds[n] for n in SYNTHETIC_WORLDS} == {"SyntheticKind"} and len(SYNTHETIC_WORLDS) >= 5
    assert KINDS.get("spiral") is KINDS.get("coupling")  # one kind serves every synthetic name
    for name in SYNTHETIC_WORLDS:
        kind, spec = KINDS.get(name), make_spec(name)
        assert kind.check_spec(spec) is spec
        world = kind.from_spec(spec)
        assert type(world) is SyntheticWorld and world.spec == spec
        assert kind.default_encoder(world) == kind.default_encoder(spec)


def test_the_synthetic_kind_writes_pairs_that_the_pairs_kind_reads(tmp_path):
    kind, spec = KINDS.get("banana"), make_spec("banana", rho=0.9)
    assert not kind.writes_directory and kind.refuses == {"epochs"}
    assert kind.recipes() == {} and kind.train_defaults() == {}
    out = tmp_path / "b.safetensors"
    assert kind.write(spec, out, 100, 3, None) == (f"wrote 100 pairs of banana (N=2, gaussian, "
                                                   f"ρ=0.9) to {out}")
    pairs = make_spec(data=str(out))
    world = build_world(pairs)
    assert pairs.name == "pairs" and world.inner.spec == spec
    assert world.eval_set(None, 0).z.shape == (100, 2)
    with pytest.raises(IdauditError, match="workers does not apply") as exc:
        kind.write(spec, out, 100, 3, 2)
    assert exc.value.exit_code == 2


def test_the_pairs_kind_answers_for_its_file(tmp_path):
    from idaudit.worlds import save_pairs

    path = save_pairs(tmp_path / "p.safetensors", build_world(make_spec("coupling", dim=4)), 64, 0)
    spec = make_spec(data=str(path))
    kind = KINDS.get(spec.name)
    assert kind.options == {"data"} and kind.refuses == {"steps"}
    assert kind.train_defaults() == {"views": "pair", "epochs": 100}
    assert kind.default_encoder(spec) == ("coupling", {"dim": 4, "layers": 4})
    assert kind.default_encoder(kind.from_spec(spec)) == ("coupling", {"dim": 4, "layers": 4})
    assert kind.data_exists(path) and not kind.data_exists(tmp_path / "none")
    assert kind.prepare(spec, tmp_path) is spec
    for call, fragment in [(lambda: kind.write(spec, tmp_path / "o", 10, 0, None),
                            "cannot be written as a dataset"),
                           (lambda: kind.prepare(spec, tmp_path, workers=2),
                            "workers does not apply")]:
        with pytest.raises(IdauditError, match=fragment) as exc:
            call()
        assert exc.value.exit_code == 2


def test_the_reacher_kind_holds_its_recipes_and_training_defaults():
    kind = KINDS.get("reacher")
    assert kind.writes_directory and kind.refuses == {"steps", "n_eval"}
    recipes = kind.recipes()
    assert sorted(recipes) == ["cpu", "paper"]
    assert recipes["cpu"].options["image_size"] == 32
    assert recipes["paper"].options["pairs"] == 100_000
    recipes.clear()
    assert len(kind.recipes()) == 2  # each call gives a copy
    assert kind.train_defaults()["lamb"] == 5e-3
    spec = make_spec("reacher", rho=0.9, image_size=32)
    assert spec.extra["data"] is None and spec.extra["dataset"]["image_size"] == 32
    assert kind.check_spec(spec) is spec
    with pytest.raises(IdauditError, match="no rendered dataset yet"):
        kind.from_spec(spec)
