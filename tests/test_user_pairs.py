"""World pairs for a user's own loop: ``idaudit.world_pairs`` and ``idaudit.WorldPairs``."""

from __future__ import annotations

import pydoc
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import rounding
import torch

import idaudit
from idaudit.core.errors import IdauditError
from idaudit.worlds import SyntheticWorld, make_spec, save_pairs
from idaudit.worlds.base import split_views

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_world_pairs_are_the_worlds_law():
    """x = g(z), x′ = g(z′), z′ one OU step from z: corr(z_j, z′_j) = ρ (n = 40 000, its sd
    is (1 − ρ²)/√n ≈ 0.001, so 0.01 is ten of them)."""
    p = idaudit.world_pairs("banana", n=40_000, rho=0.8, seed=3)
    world = SyntheticWorld(make_spec("banana", rho=0.8))
    assert torch.equal(p.x, world.observe(p.z)) and torch.equal(p.x_prime, world.observe(p.z_prime))
    for j in range(2):
        r = np.corrcoef(p.z[:, j].numpy(), p.z_prime[:, j].numpy())[0, 1]
        assert abs(r - 0.8) < 0.01
    assert abs(float(p.z.var(0).mean()) - 1.0) < 0.03  # unit-variance sources
    assert p.x.shape == (40_000, 2) and p.z.dtype == torch.float32


def test_same_seed_same_pairs_other_seed_other_pairs():
    a = idaudit.world_pairs("spiral", n=500, seed=7)
    b = idaudit.world_pairs("spiral", n=500, seed=7)
    c = idaudit.world_pairs("spiral", n=500, seed=8)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(a.z, c.z)
    assert torch.equal(idaudit.world_pairs("spiral", n=500).z,
                       idaudit.world_pairs("spiral", n=500, seed=0).z)


def test_dataset_draws_fresh_pairs_each_epoch_reproducibly():
    data = idaudit.WorldPairs("spiral", n=300, seed=2)
    first = idaudit.world_pairs("spiral", n=300, seed=2)
    assert data.fresh and len(data) == 300
    assert all(torch.equal(u, v) for u, v in zip(data.pairs, first))  # epoch 0
    x, xp, z, zp = data[5]
    assert torch.equal(z, first.z[5]) and x.shape == (2,)
    data.set_epoch(1)
    one = data.pairs.z.clone()
    assert not torch.equal(one, first.z)
    again = idaudit.WorldPairs("spiral", n=300, seed=2)
    again.set_epoch(1)
    assert torch.equal(again.pairs.z, one)
    data.set_epoch(0)
    assert torch.equal(data.pairs.z, first.z)
    loader = torch.utils.data.DataLoader(data, batch_size=100)
    batches = list(loader)
    assert len(batches) == 3 and batches[0][2].shape == (100, 2)


def test_stored_pairs_are_returned_as_stored(tmp_path):
    path = tmp_path / "p.safetensors"
    save_pairs(path, SyntheticWorld(make_spec("sinusoid", rho=0.9)), 200, seed=4)
    p = idaudit.world_pairs("pairs", data=path)
    ref = idaudit.world_pairs("sinusoid", n=200, rho=0.9, seed=4)  # what the file was drawn from
    assert all(torch.equal(u, v) for u, v in zip(p, ref))
    assert torch.equal(idaudit.world_pairs(data=path, n=50).z, ref.z[:50])
    data = idaudit.WorldPairs(data=path)
    assert not data.fresh
    data.set_epoch(3)  # stored pairs stay
    assert torch.equal(data.pairs.z, ref.z)
    with pytest.raises(IdauditError, match="seed does not apply"):
        idaudit.world_pairs(data=path, seed=1)
    with pytest.raises(IdauditError, match="between 1 and 200"):
        idaudit.world_pairs(data=path, n=201)


def test_bad_requests_are_one_line_errors():
    with pytest.raises(IdauditError, match="positive number of pairs"):
        idaudit.world_pairs("spiral", n=0)
    with pytest.raises(IdauditError, match="does not apply to world"):
        idaudit.world_pairs("spiral", n=10, stride=4)
    with pytest.raises(IdauditError, match="go with a world name"):
        idaudit.world_pairs(make_spec("spiral"), n=10, rho=0.5)


def test_pair_source_views_split_back():
    world = SyntheticWorld(make_spec("spiral"))
    gen = torch.Generator().manual_seed(0)
    src = world.pair_source("anchor", 64, gen, torch.device("cpu"), n_views=3)
    views = split_views(src.batch(), src.n_views)
    assert len(views) == 3 and all(v.shape == (64, 2) for v in views)
    with pytest.raises(IdauditError, match="does not split into 3 views"):
        split_views(torch.zeros(10, 2), 3)


def test_help_of_the_world_interface_documents_every_member():
    text = pydoc.render_doc(idaudit.World, renderer=pydoc.plaintext)
    assert "pair_source" in text and '"anchor"' in text and "pairs(" in text
    public = [n for n in dir(idaudit.World) if not n.startswith("_")]
    undocumented = [n for n in public if not (getattr(idaudit.World, n).__doc__ or "").strip()]
    assert undocumented == []


def loop_code() -> str:
    text = (DOCS / "user-loop.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, "docs/user-loop.md holds one Python block: the loop"
    return blocks[0]


def test_the_loop_in_the_docs_runs_on_public_names_and_beats_the_mixing(tmp_path):
    """docs/user-loop.md's loop, as written: it imports only torch and idaudit, and its
    encoder recovers the spiral's latents (held-out R² ≥ 0.9, the raw mixing's 0.01)."""
    code = loop_code()
    assert set(re.findall(r"^\s*(?:import|from) (\w+)", code, flags=re.M)) == {"torch", "idaudit"}
    used = set(re.findall(r"idaudit\.(\w+)", code))
    assert used <= set(idaudit.__all__), used - set(idaudit.__all__)
    (tmp_path / "loop.py").write_text(code)
    from test_doc_examples import doc_env

    res = subprocess.run([sys.executable, "loop.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=900, env=doc_env("docs/user-loop.md", "import idaudit"))
    assert res.returncode == 0, res.stderr
    verdict, r2, mixing = res.stdout.split()[-3:]
    assert verdict == "pass" and float(r2) >= 0.9 and float(mixing) < 0.1
    # the line the docs show, its numbers within another CPU's spread (tests/rounding.py)
    rounding.check_printed("user-loop", res.stdout.splitlines()[-1] + "\n")
