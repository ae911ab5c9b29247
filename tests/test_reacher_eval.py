"""Reacher evaluation pairs at any image size: the angles, the pixels, the cache, the errors."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

pytest.importorskip("dm_control")

from idaudit.core.errors import IdauditError  # noqa: E402
from idaudit.worlds.reacher import data as rd  # noqa: E402
from idaudit.worlds.reacher import eval_pairs as re_  # noqa: E402
from idaudit.worlds.reacher.eval_pairs import (  # noqa: E402
    ReacherEvalSpec,
    cache_key,
    cache_root,
    eval_pairs,
    reacher_eval_set,
)
from idaudit.worlds.reacher.render import (
    ReacherRenderer,  # noqa: E402
    render_settings,  # noqa: E402
)

RHO = 0.9
SEED = 20_260_525


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def ev224(cache):
    return reacher_eval_set(RHO, 224, 8, cache_dir=cache, workers=1)


def _no_render(*args, **kwargs):
    raise AssertionError("rendered although a valid cache was there")


def test_eval_set_at_224_px_holds_pairs(ev224):
    assert ev224.x.shape == (8, 224, 224, 3) and ev224.x.dtype == np.uint8
    assert ev224.x_prime.shape == (8, 224, 224, 3) and ev224.x_prime.dtype == np.uint8
    assert ev224.z.shape == (8, 2) and ev224.z.dtype == torch.float64
    assert ev224.rho == RHO and ev224.circular == (0, 1) and ev224.test_rows is None
    assert not np.array_equal(ev224.x, ev224.x_prime)


def test_partners_follow_one_ou_step_from_the_seed(ev224, cache):
    z = np.random.default_rng(SEED).standard_normal((8, 2))
    eta = np.random.default_rng([SEED, 1]).standard_normal((8, 2))
    np.testing.assert_array_equal(ev224.z.numpy(), z)
    pairs = eval_pairs(ReacherEvalSpec(RHO, 224, 8), cache)
    np.testing.assert_allclose(pairs.z_prime, RHO * z + math.sqrt(1 - RHO**2) * eta, rtol=0,
                               atol=1e-15)
    # the default seed's z are every Reacher dataset's evaluation angles
    np.testing.assert_array_equal(z, rd.eval_angles(30)[:8])


def test_the_pixels_are_the_renderers_at_that_size(ev224, cache):
    pairs = eval_pairs(ReacherEvalSpec(RHO, 224, 8), cache)
    renderer = ReacherRenderer(224)
    np.testing.assert_array_equal(renderer.render(pairs.z[:2]), ev224.x[:2])
    np.testing.assert_array_equal(renderer.render(pairs.z_prime[-1:]), ev224.x_prime[-1:])


def test_a_second_call_reads_the_cache(ev224, cache, monkeypatch):
    spec = ReacherEvalSpec(RHO, 224, 8)
    first = eval_pairs(spec, cache)
    chunk = first.path / "pairs-00000.npz"
    mtime = chunk.stat().st_mtime_ns
    monkeypatch.setattr(re_, "_render", _no_render)
    again = eval_pairs(spec, cache)
    assert not again.rendered and again.reason is None and again.path == first.path
    np.testing.assert_array_equal(again.x, ev224.x)
    np.testing.assert_array_equal(again.x_prime, ev224.x_prime)
    assert chunk.stat().st_mtime_ns == mtime
    # one directory, nothing left beside it (no temporaries)
    assert [p.name for p in (cache / "reacher-eval").iterdir()] == [first.path.name]


def _corrupt_meta(path):
    (path / "meta.json").write_text((path / "meta.json").read_text()[:40])


def _truncate_chunk(path):
    chunk = path / "pairs-00000.npz"
    chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])


def _rewrite_chunk(path, name, change):
    """Rewrite chunk ``name`` with ``change`` applied to its arrays and its sha256 in meta.json
    updated to match, as someone who can write the cache could."""
    chunk = path / name
    with np.load(chunk) as f:
        arrays = {k: f[k] for k in f.files}
    change(arrays)
    with open(chunk, "wb") as f:
        np.savez_compressed(f, **arrays)
    meta = json.loads((path / "meta.json").read_text())
    (entry,) = (c for c in meta["chunks"] if c["name"] == name)
    entry["sha256"] = re_._sha256(chunk)
    (path / "meta.json").write_text(json.dumps(meta))


def _other_angles(path):
    # a chunk rewritten with other angles and its hash updated: only the angle check sees it
    _rewrite_chunk(path, "pairs-00000.npz", lambda a: a.update(z=a["z"] + 1e-9))


def _missing_chunk(path):
    (path / "pairs-00000.npz").unlink()


@pytest.mark.parametrize("damage,reason", [
    (_truncate_chunk, "sha256 differs"),
    (_corrupt_meta, "meta.json unreadable"),
    (_other_angles, "pairs-00000.npz are not this seed's"),
    (_missing_chunk, "unreadable"),
])
def test_a_damaged_cache_is_rendered_again(tmp_path, monkeypatch, capsys, damage, reason):
    spec = ReacherEvalSpec(RHO, 32, 12)
    first = eval_pairs(spec, tmp_path, workers=1)
    assert first.rendered and first.path.is_dir()
    damage(first.path)
    again = eval_pairs(spec, tmp_path, workers=1)
    assert again.rendered and reason in again.reason and again.path == first.path
    assert reason in capsys.readouterr().err
    np.testing.assert_array_equal(again.x, first.x)
    np.testing.assert_array_equal(again.x_prime, first.x_prime)
    # repaired: the third call reads it
    monkeypatch.setattr(re_, "_render", _no_render)
    third = eval_pairs(spec, tmp_path)
    assert not third.rendered
    assert [p.name for p in (tmp_path / "reacher-eval").iterdir()] == [first.path.name]


# ---- a cache that passes its manifest is checked against a fresh render of a few frames ------


@pytest.fixture
def three_chunks(monkeypatch):
    """A spec of 12 pairs at 16 px written in three chunks of 4 rows."""
    monkeypatch.setattr(re_, "CHUNK_BYTES", 4 * 3 * 16**2)
    spec = ReacherEvalSpec(RHO, 16, 12)
    assert spec.chunk_rows() == 4
    return spec


def _blacken(arrays):
    arrays["x"][:] = 0
    arrays["x_prime"][:] = 0


def test_a_replaced_chunk_with_its_sha256_is_rendered_again(tmp_path, capsys, three_chunks):
    first = eval_pairs(three_chunks, tmp_path, workers=1)
    assert sorted(p.name for p in first.path.iterdir()) == [
        "meta.json", "pairs-00000.npz", "pairs-00001.npz", "pairs-00002.npz"]
    capsys.readouterr()
    _rewrite_chunk(first.path, "pairs-00001.npz", _blacken)  # the manifest checks pass
    again = eval_pairs(three_chunks, tmp_path, workers=1)
    err = capsys.readouterr().err
    assert again.rendered and again.path == first.path
    assert "frames rendered again differ from the cached ones in pairs-00001.npz" in again.reason
    assert err.startswith(f"note: the cached evaluation set {first.path} is not usable (")
    assert again.reason in err and err.endswith("; rendering it again\n") and err.count("\n") == 1
    np.testing.assert_array_equal(again.x, first.x)  # a fresh render, not the black images
    np.testing.assert_array_equal(again.x_prime, first.x_prime)
    assert again.x[4:8].any() and again.x_prime[4:8].any()
    # repaired: read again, with no note
    third = eval_pairs(three_chunks, tmp_path, workers=1)
    assert not third.rendered and third.reason is None and not capsys.readouterr().err


def test_one_altered_frame_is_caught_when_it_is_drawn(tmp_path, capsys, monkeypatch,
                                                      three_chunks):
    first = eval_pairs(three_chunks, tmp_path, workers=1)
    _rewrite_chunk(first.path, "pairs-00002.npz",
                   lambda a: a["x_prime"][1].__setitem__((slice(0, 2), slice(0, 2)), 7))
    drawn = re_._spot_frames
    monkeypatch.setattr(re_, "_spot_frames", lambda rows: sorted({*drawn(rows), (1, 9)}))
    again = eval_pairs(three_chunks, tmp_path, workers=1)
    assert again.rendered
    assert again.reason.endswith("in pairs-00002.npz, first x_prime row 9")
    assert again.reason in capsys.readouterr().err
    np.testing.assert_array_equal(again.x_prime, first.x_prime)


def test_an_untouched_cache_is_checked_and_used(tmp_path, capsys, monkeypatch, three_chunks):
    first = eval_pairs(three_chunks, tmp_path, workers=1)
    capsys.readouterr()
    checked = []
    spot_check = re_._spot_check
    monkeypatch.setattr(re_, "_spot_check", lambda *a: checked.append(a[-1]) or spot_check(*a))
    monkeypatch.setattr(re_, "_render", _no_render)
    again = eval_pairs(three_chunks, tmp_path, workers=1)
    assert not again.rendered and again.reason is None and not capsys.readouterr().err
    np.testing.assert_array_equal(again.x, first.x)
    (frames,) = checked
    assert {r // 4 for _, r in frames} == {0, 1, 2} and {v for v, _ in frames} == {0, 1}


@pytest.mark.parametrize("rows,count", [([4, 4, 4], 4), ([1], 2), ([3], 4), ([1000] * 20, 20),
                                        ([1000] * 3 + [7], 4), ([2] * 16, 16)])
def test_the_frames_drawn_cover_every_chunk_and_both_views(rows, count):
    starts = np.cumsum(rows) - rows
    draws = [re_._spot_frames(rows) for _ in range(5)]
    for frames in draws:
        assert len(frames) == len(set(frames)) == count
        assert {int(np.searchsorted(starts, r, side="right")) - 1 for _, r in frames} \
            == set(range(len(rows)))
        assert {v for v, _ in frames} == {0, 1}
        assert all(v in (0, 1) and 0 <= r < sum(rows) for v, r in frames)
    if sum(rows) > 10:  # drawn anew each time, not from a fixed seed
        assert len({tuple(f) for f in draws}) > 1


def test_every_parameter_and_the_renderer_change_the_key():
    spec = ReacherEvalSpec(RHO, 224, 8)
    renderer = {"mujoco": "3.17.0", "gl": "egl"}
    keys = {cache_key(s, renderer) for s in (spec, ReacherEvalSpec(0.95, 224, 8),
                                             ReacherEvalSpec(RHO, 256, 8),
                                             ReacherEvalSpec(RHO, 224, 9),
                                             ReacherEvalSpec(RHO, 224, 8, seed=1))}
    keys.add(cache_key(spec, {**renderer, "gl": "osmesa"}))
    keys.add(cache_key(spec, {**renderer, "mujoco": "3.18.0"}))
    assert len(keys) == 7
    assert cache_key(spec, renderer).startswith("ou-rho0.9-px224-n8-s20260525-")


def test_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("IDAUDIT_CACHE", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env"
    assert cache_root(tmp_path / "given") == tmp_path / "given"
    monkeypatch.delenv("IDAUDIT_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "idaudit"


@pytest.mark.parametrize("spec,fragment", [
    (ReacherEvalSpec(image_size=8), "image_size must lie in [16, 512] pixels"),
    (ReacherEvalSpec(image_size=513), "image_size must lie in [16, 512] pixels"),
    (ReacherEvalSpec(rho=1.0), "rho must lie strictly between 0 and 1"),
    (ReacherEvalSpec(n=0), "n_eval must be ≥ 1"),
    (ReacherEvalSpec(seed=-1), "seed"),
    (ReacherEvalSpec(image_size=224.0), "image_size"),
])
def test_bad_specs_are_one_line_errors(spec, fragment):
    with pytest.raises(IdauditError) as info:
        spec.validate()
    assert info.value.exit_code == 2
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_sizes_up_to_512_are_accepted():
    assert ReacherEvalSpec(image_size=512).validate().image_size == 512
    assert ReacherEvalSpec(image_size=16).validate().chunk_rows() == 1000
    assert ReacherEvalSpec(image_size=512).validate().chunk_rows() == 170


def test_an_unwritable_cache_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(IdauditError, match="cannot write the evaluation cache") as info:
        eval_pairs(ReacherEvalSpec(RHO, 16, 2), blocker, workers=1)
    assert info.value.exit_code == 2 and "\n" not in str(info.value)


def test_without_a_cache_nothing_is_written(tmp_path):
    pairs = eval_pairs(ReacherEvalSpec(RHO, 16, 3), tmp_path, workers=1, cache=False)
    assert pairs.rendered and pairs.path is None and pairs.x.shape == (3, 16, 16, 3)
    assert not (tmp_path / "reacher-eval").exists()


def test_a_pixel_encoders_label_free_report_has_the_pair_signals(tmp_path):
    from idaudit.evaluations.audit import audit
    from idaudit.loading.image_input import ImageAdapter, parse_normalize
    from idaudit.models.encoders import embed

    ev = reacher_eval_set(RHO, 32, 60, cache_dir=tmp_path, workers=1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 8, stride=8), torch.nn.Flatten(),
                              torch.nn.Linear(64, 3))
    enc = ImageAdapter(net, parse_normalize("imagenet"))
    h, hp = embed(enc, ev.x), embed(enc, ev.x_prime)
    report = audit(h=h.numpy(), h_prime=hp.numpy(), rho=ev.rho)
    m = report.metrics
    assert m["label_free"] and m["n_samples"] == 60
    for key in ("rho_estimated", "canonical_min", "canonical_spread", "alignment_gap",
                "bound", "canonical_shortfall"):
        assert np.isfinite(m[key]), key
    assert m["canonical_min"] <= m["rho_estimated"] < 1
    # shortfall = ρ − mean canonical correlation = ρ − (ρ̂ − spread)
    assert m["canonical_shortfall"] == pytest.approx(
        RHO - (m["rho_estimated"] - m["canonical_spread"]), abs=1e-12)
    # the rows are pairs: shuffling the partners loses the correlation
    shuffled = audit(h=h.numpy(), h_prime=hp.numpy()[np.random.default_rng(0).permutation(60)],
                     rho=ev.rho).metrics
    assert shuffled["rho_estimated"] < m["rho_estimated"] - 0.2  # 0.07 against 0.46


def test_copies_of_a_cache_elsewhere_are_read(tmp_path, monkeypatch):
    spec = ReacherEvalSpec(RHO, 16, 5)
    first = eval_pairs(spec, tmp_path / "a", workers=1)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    monkeypatch.setattr(re_, "_render", _no_render)
    moved = eval_pairs(spec, tmp_path / "b")
    assert not moved.rendered and moved.path == tmp_path / "b" / "reacher-eval" / first.path.name


def test_a_killed_renders_temporary_is_removed(tmp_path):
    spec = ReacherEvalSpec(RHO, 16, 2)
    key = cache_key(spec, render_settings())
    root = tmp_path / "reacher-eval"
    dead = root / f".{key}.999999999.abc123.tmp"  # a pid no process has
    dead.mkdir(parents=True)
    (dead / "pairs-00000.npz").write_bytes(b"half")
    pairs = eval_pairs(spec, tmp_path, workers=1)
    assert sorted(p.name for p in root.iterdir()) == [pairs.path.name]


def test_an_audit_on_a_tampered_cache_says_so_and_renders_again(tmp_path):
    from conftest import run

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 8, stride=8), torch.nn.Flatten(),
                              torch.nn.Linear(16, 3))
    torch.jit.trace(net, torch.zeros(1, 3, 16, 16)).save(str(tmp_path / "enc.pt"))
    args = ("audit", tmp_path / "enc.pt", "--world", "reacher", "--image-size", 16, "--n-eval",
            40, "--normalize", "none", "--cache-dir", tmp_path / "cache")
    clean = run(*args, "--json", tmp_path / "clean.json")
    assert clean.exit_code == 0 and "cached evaluation set" not in clean.output, clean.output
    (entry,) = (tmp_path / "cache" / "reacher-eval").iterdir()
    _rewrite_chunk(entry, "pairs-00000.npz", _blacken)
    tampered = run(*args, "--json", tmp_path / "tampered.json")
    assert tampered.exit_code == 0, tampered.output
    assert (f"note: the cached evaluation set {entry} is not usable (" in tampered.output
            and "rendering it again" in tampered.output)
    metrics = [json.loads((tmp_path / f"{k}.json").read_text())["metrics"]
               for k in ("clean", "tampered")]
    assert metrics[0] == metrics[1]  # the same audit as on the untouched cache
