"""Issue 27: nothing in an untrusted file chooses memory to take or files to read elsewhere.

* ``torch.save`` files: what ``torch.load`` would allocate is found first (zip members at the
  sizes the zip directory gives, declared storages, array shapes, pickled objects), by a dry run
  that imports nothing; bombs are refused in one line with a small peak RSS, and the bound on
  the pickled objects is measured against real loads of the worst pickles known;
* Hugging Face and LeWM directories: the network sized on the meta device before it is built,
  weight files named by an index only inside the directory;
* ``timm:`` names with a source (``hf-hub:``, ``local-dir:``) refused before timm is imported;
* the policy table of :mod:`idaudit.loading.trust` is the one docs/checkpoints.md prints.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import one_line, run
from standins import inflating_pickle

from idaudit.core.errors import IdauditError
from idaudit.loading import trust
from idaudit.loading.torch_file_sizes import OBJECT_BYTES_PER_PICKLE_BYTE, torch_file_bytes

AUDIT = ("--world", "coupling", "--dim", "4", "--n-eval", "1000", "--gauss-sims", "0")
ROOT = Path(__file__).resolve().parents[1]


def linear_pt(path: Path, legacy: bool = False) -> dict:
    state = torch.nn.Linear(4, 4).state_dict()
    torch.save(state, str(path), _use_new_zipfile_serialization=not legacy)
    return state


def rezip(src: Path, dst: Path, replace: dict[str, bytes], deflate: tuple[str, ...] = ()) -> None:
    """``src`` (a torch.save zip) rewritten as ``dst``: members ending with a key of
    ``replace`` get its bytes; those ending with a name in ``deflate`` are compressed."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = next((v for k, v in replace.items() if info.filename.endswith(k)),
                        zin.read(info.filename))
            method = zipfile.ZIP_DEFLATED if info.filename.endswith(deflate) else \
                zipfile.ZIP_STORED
            zout.writestr(info.filename, data, compress_type=method)


# ---- the bound itself ---------------------------------------------------------------------


def test_bytes_of_plain_files_cover_their_tensors(tmp_path):
    for legacy in (False, True):
        path = tmp_path / f"w{int(legacy)}.pt"
        state = linear_pt(path, legacy)
        tensors = sum(t.numel() * t.element_size() for t in state.values())
        found = torch_file_bytes(path)
        assert tensors <= found <= tensors + OBJECT_BYTES_PER_PICKLE_BYTE * path.stat().st_size


def test_the_dry_run_counts_declared_buffers_without_allocating(tmp_path):
    src = tmp_path / "w.pt"
    linear_pt(src)
    big = 1 << 40  # a TiB: never allocated by the dry run
    pkl = (b"\x80\x02cbuiltins\nbytearray\n\x8a\x06" + big.to_bytes(6, "little") + b"\x85R.")
    rezip(src, tmp_path / "b.pt", {"data.pkl": pkl})
    assert torch_file_bytes(tmp_path / "b.pt") >= big
    arr = (b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n"
           b"\x8a\x06" + big.to_bytes(6, "little") + b"\x85C\x01b\x87R.")
    rezip(src, tmp_path / "a.pt", {"data.pkl": arr})
    assert torch_file_bytes(tmp_path / "a.pt") >= big


def test_storages_declaring_more_than_the_file_holds_are_refused(tmp_path):
    src = tmp_path / "w.pt"
    torch.save({"t": torch.zeros(1000)}, str(src))
    with zipfile.ZipFile(src) as z:
        pkl = next(z.read(n) for n in z.namelist() if n.endswith("data.pkl"))
    grown = pkl.replace(b"M\xe8\x03", b"J" + struct.pack("<i", 2_000_000_000), 1)
    assert grown != pkl
    rezip(src, tmp_path / "z.pt", {"data.pkl": grown})
    with pytest.raises(IdauditError, match="declares 8000000000 bytes but its record holds 4000"):
        torch_file_bytes(tmp_path / "z.pt")
    legacy = tmp_path / "legacy.pt"
    torch.save({"t": torch.zeros(1000)}, str(legacy), _use_new_zipfile_serialization=False)
    raw = legacy.read_bytes()
    grown = raw.replace(b"M\xe8\x03", b"J" + struct.pack("<i", 2_000_000_000), 1)
    assert grown != raw
    legacy.write_bytes(grown)
    with pytest.raises(IdauditError, match="declare 8000000000 bytes but the file holds only"):
        torch_file_bytes(legacy)


WORST = {"set": b"\x8fa", "dict": b"}a", "list": b"]a"}  # an object and its APPEND: 2 bytes


@pytest.mark.parametrize("kind", sorted(WORST))
def test_the_object_bound_holds_for_the_worst_pickles(tmp_path, kind):
    """A bound must bound: torch.load(weights_only=True) of a data.pkl that is nothing but
    small objects grows the RSS by less than OBJECT_BYTES_PER_PICKLE_BYTE per pickle byte."""
    src = tmp_path / "w.pt"
    linear_pt(src)
    body = b"\x80\x04]" + WORST[kind] * 400_000 + b"."
    rezip(src, tmp_path / "o.pt", {"data.pkl": body})
    code = textwrap.dedent(f"""
        import os, torch
        def rss():  # resident now (the peak so far may be the import's)
            return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        before = rss()
        obj = torch.load({str(tmp_path / 'o.pt')!r}, weights_only=True)
        assert len(obj) == 400_000
        print(rss() - before)
    """)
    grew = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True).stdout)
    assert 0 < grew < OBJECT_BYTES_PER_PICKLE_BYTE * len(body), (grew, len(body))
    assert torch_file_bytes(tmp_path / "o.pt") >= OBJECT_BYTES_PER_PICKLE_BYTE * len(body)


# ---- bombs, through the CLI ----------------------------------------------------------------


def test_a_pickle_that_inflates_is_refused_with_a_small_peak(tmp_path):
    """1 GiB of data.pkl deflated to about a MB: up to 256 GiB with its objects, refused on
    any machine with less, before torch.load reads a byte; the child's peak RSS stays small."""
    src = tmp_path / "w.pt"
    linear_pt(src)
    bomb = tmp_path / "bomb.pt"
    inflating_pickle(bomb, src, 1 << 30)
    assert bomb.stat().st_size < 8 << 20
    code = ("import sys\nfrom idaudit._entry import main\nsys.argv = ['idaudit', "
            f"'audit', {str(bomb)!r}, '--arch', 'torch.nn:Identity', *{list(AUDIT)!r}]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
            "hwm = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
            "print('peak', int(hwm) * 1024, code)")  # this process's own peak (ru_maxrss keeps
    # the parent's from before exec)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path)
    peak, exit_code = res.stdout.split()[-2:]
    assert exit_code == "2", res.stdout + res.stderr
    err = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "data.pkl is compressed" in err[0] and "--trust-code" in err[0], err
    assert int(peak) < 1 << 30, peak


@pytest.fixture
def small_budget(monkeypatch):
    """A process that may allocate only 16 MiB more (what the checks read)."""
    monkeypatch.setattr(trust, "memory_budget", lambda: float(16 << 20))


def test_a_deflated_storage_bomb_is_refused_before_loading(tmp_path, monkeypatch, small_budget):
    """A compressed member (torch.save writes none) is refused whatever the memory; a stored
    file larger than the memory left is refused by the size check; trusted, both are read."""
    monkeypatch.chdir(tmp_path)
    torch.save({"t": torch.zeros(40 << 20, dtype=torch.uint8)}, "big.pt")
    rezip(Path("big.pt"), Path("bomb.pt"), {}, deflate=("data/0",))
    assert Path("bomb.pt").stat().st_size < 1 << 20
    one_line(run("audit", "bomb.pt", "--arch", "torch.nn:Identity", *AUDIT), 2,
             "big/data/0 is compressed (")
    one_line(run("audit", "big.pt", "--arch", "torch.nn:Identity", *AUDIT), 2,
             "would take up to 40 MiB of memory")
    for name in ("bomb.pt", "big.pt"):  # trusted, read as it is: no state dict for Identity
        one_line(run("audit", name, "--arch", "torch.nn:Identity", "--trust-code", *AUDIT), 2,
                 "1 unexpected keys (t)")


def test_a_hugging_face_config_of_a_huge_network_is_refused(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    config = transformers.BertConfig(hidden_size=65536, num_hidden_layers=48,
                                     num_attention_heads=64, intermediate_size=65536,
                                     vocab_size=128)
    Path("hf").mkdir()
    config.save_pretrained("hf")
    from safetensors.torch import save_file

    save_file({"unrelated": torch.zeros(2)}, "hf/model.safetensors")
    one_line(run("audit", "hf", *AUDIT), 2, "as its config.json describes it")


def test_a_weight_index_naming_files_outside_the_directory_is_refused(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from safetensors.torch import save_file

    monkeypatch.chdir(tmp_path)
    Path("hf").mkdir()
    Path("hf/config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8,
                                                  "num_hidden_layers": 1,
                                                  "num_attention_heads": 2,
                                                  "intermediate_size": 8, "vocab_size": 16}))
    save_file({"x": torch.zeros(2)}, "outside.safetensors")
    for name in ("../outside.safetensors", "/etc/passwd", "sub/x.safetensors"):
        Path("hf/model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": {"embeddings.x": name}}))
        one_line(run("audit", "hf", *AUDIT), 2, "not a file of hf")


def test_a_lewm_config_of_a_huge_network_is_refused(tmp_path, monkeypatch):
    pytest.importorskip("hydra")
    monkeypatch.chdir(tmp_path)
    Path("lewm").mkdir()
    torch.save({}, "lewm/weights.pt")
    Path("lewm/config.json").write_text(json.dumps(
        {"_target_": "torch.nn.Linear", "in_features": 1 << 20, "out_features": 1 << 20}))
    one_line(run("audit", "lewm", *AUDIT), 2, "4096.0 GiB of memory (the network its config")


@pytest.mark.parametrize("name", ["hf-hub:someorg/somemodel", "hf_hub:someorg/x",
                                  "local-dir:/tmp/anywhere", "vit_small/../x", "a b"])
def test_timm_names_with_a_source_are_refused_before_timm_loads(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, "w.safetensors")
    imported = "timm" in sys.modules
    one_line(run("audit", "w.safetensors", "--arch", f"timm:{name}", *AUDIT), 2,
             "sources such as hf-hub: or local-dir: are not taken")
    assert ("timm" in sys.modules) == imported


# ---- smaller holes -------------------------------------------------------------------------


def test_a_denormal_std_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.jit.script(torch.nn.Flatten()).save("enc.pt")
    one_line(run("audit", "enc.pt", "--normalize", "0.5,1e-310", "--world", "reacher",
                 "--image-size", "16"), 2, "the std must be at least 1e-06")


def test_cache_dir_equal_to_an_output_is_refused_before_any_render(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.jit.script(torch.nn.Flatten()).save("enc.pt")
    one_line(run("embed", "enc.pt", "--world", "reacher", "--image-size", "16", "--out", "e.npz",
                 "--cache-dir", "e.npz"), 2, "--out e.npz: is the same file as --cache-dir")
    one_line(run("audit", "enc.pt", "--world", "reacher", "--image-size", "16", "--json",
                 "c", "--cache-dir", "c"), 2, "--json c: is the same file as --cache-dir")
    assert not Path("e.npz").exists() and not Path("c").exists()


def test_the_policy_table_is_the_docs_table():
    docs = (ROOT / "docs" / "checkpoints.md").read_text()
    for kind, (untrusted, trusted) in trust.POLICY.items():
        assert f"| {kind} | {untrusted} | {trusted} |" in docs, kind
    assert "never run idaudit inside a downloaded directory" in docs


def test_trust_pickle_skips_the_checks_only_when_given(tmp_path, small_budget):
    src = tmp_path / "w.pt"
    linear_pt(src)
    inflating_pickle(tmp_path / "b.pt", src, 1 << 20)
    assert torch_file_bytes(tmp_path / "b.pt") >= OBJECT_BYTES_PER_PICKLE_BYTE << 20
    with pytest.raises(IdauditError, match="trust_pickle"):
        trust.check_torch_file(tmp_path / "b.pt", trusted=False)
    assert trust.check_torch_file(tmp_path / "b.pt", trusted=True) is None  # vouched for
