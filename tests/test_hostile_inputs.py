"""Hostile inputs, fourth round (issue 18): each case ended in exit 5 "internal error" (or was
wrongly accepted) and now gets the exit code a user's mistake gets — 2 with one line naming
the problem, 3 where no verdict can be given.

Every case is one row of :data:`CASES`: (name, build, args, exit code before, after, fragment).
``build(d, fx)`` writes the inputs into the directory ``d`` (``fx`` holds a small checkpoint);
``args`` are the command's arguments, ``{d}`` and ``{ck}`` standing for the directory and the
checkpoint. The "before" codes are those of the tree before issue 18; to check them again, run
this file with ``IDAUDIT_BEFORE_SRC=/path/to/old/src`` (every case then also runs, as a
subprocess, against that source tree, in one test that is skipped otherwise).
"""

from __future__ import annotations

import functools
import json
import os
import resource
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import one_line, run
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from standins import from_file_module, inflating_pickle

DEEP = "[" * 100_000  # nesting deep enough to hit Python's recursion limit


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    ck = d / "c.safetensors"
    res = run("train", "--world", "coupling", "--dim", "4", "--steps", "20", "--eval-every",
              "20", "--n-eval", "500", "--out", ck, "--quiet")
    assert res.exit_code == 0, res.output
    return SimpleNamespace(ck=ck, dir=d)


# ---- builders ---------------------------------------------------------------------------


def nothing(d, fx):
    pass


def edited_checkpoint(section, change=None, raw=None):
    """A copy of the checkpoint (as d/e.safetensors) with one metadata section edited by
    ``change`` (on the parsed JSON) or replaced by the text ``raw``."""
    def build(d, fx):
        with safe_open(str(fx.ck), framework="pt") as f:
            meta = dict(f.metadata())
        if raw is not None:
            meta[section] = raw
        else:
            value = json.loads(meta[section])
            change(value)
            meta[section] = json.dumps(value)
        save_file(load_file(str(fx.ck)), str(d / "e.safetensors"), metadata=meta)
    return build


def world_as(**fields):
    return edited_checkpoint("world", lambda w: w.update(fields))


RSPEC = {"mode": "ou", "rho": 0.9, "stride": 8, "pairs": 24, "n_eval": 12, "seed": 0,
         "image_size": 16}


def _images(n, size=16, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def reacher(meta=None, raw=None, chunks=None):
    """A Reacher dataset written by hand at d/r (24 OU pairs, 12 evaluation images of 16 × 16
    pixels): ``meta`` edits meta.json's object, ``raw`` replaces its text, ``chunks`` edits
    the {file name: arrays} of the chunks (a value None: that file is left out)."""
    def build(d, fx):
        root = d / "r"
        root.mkdir()
        rng = np.random.default_rng(1)
        z = rng.standard_normal((24, 2))
        files = {"train-00000.npz": {"z": z, "z_prime": 0.9 * z, "x": _images(24),
                                     "x_prime": _images(24, seed=1)},
                 "eval-00000.npz": {"z": rng.standard_normal((12, 2)), "x": _images(12, seed=2)}}
        if chunks is not None:
            chunks(files)
        for name, arrays in files.items():
            if arrays is not None:
                np.savez(root / name, **arrays)
        m = {"format": "idaudit-reacher", "format_version": 1, "spec": dict(RSPEC),
             "status": "complete", "channel_mean": [0.5] * 3, "channel_std": [0.25] * 3}
        if meta is not None:
            meta(m)
        (root / "meta.json").write_text(raw if raw is not None else json.dumps(m))
    return build


def meta_dir(d, fx):
    reacher()(d, fx)
    (d / "r" / "meta.json").unlink()
    (d / "r" / "meta.json").mkdir()


def pop(key, where=None):
    def change(m):
        (m if where is None else m[where]).pop(key)
    return change


def put(key, value, where=None):
    def change(m):
        (m if where is None else m[where])[key] = value
    return change


def trajectory_without_rho(m):
    m["spec"].update(mode="trajectory")
    m["rho_1"] = 0.95


def object_chunk(files):
    files["train-00000.npz"]["x"] = np.array([None] * 24, dtype=object)


def eval_images_of_another_size(files):
    files["eval-00000.npz"]["x"] = _images(12, size=32)


def no_chunks(files):
    files["train-00000.npz"] = files["eval-00000.npz"] = None


def text(name, content):
    def build(d, fx):
        (d / name).write_text(content)
    return build


def pairs_file_with(world_text):
    def build(d, fx):
        assert run("world", "spiral", "--pairs", "50", "--out", d / "p0.safetensors").exit_code == 0
        with safe_open(str(d / "p0.safetensors"), framework="pt") as f:
            meta = dict(f.metadata())
        meta["world"] = world_text
        save_file(load_file(str(d / "p0.safetensors")), str(d / "p.safetensors"), metadata=meta)
    return build


Z = np.random.default_rng(5).standard_normal((400, 3))


def npz(name="a.npz", **arrays):
    def build(d, fx):
        np.savez(d / name, **arrays)
    return build


def npy(*arrays):
    def build(d, fx):
        for i, a in enumerate(arrays):
            np.save(d / f"{i}.npy", a)
    return build


SUITE_BASE = {"world": "spiral", "steps": 5, "n_eval": 100, "eval_every": 5, "seed": 0}


def suite(top=None, **fixed):
    """d/s.toml: one quick spiral run, its [fixed] options changed by ``fixed`` (or the whole
    file ``top``)."""
    options = {**SUITE_BASE, **fixed}
    body = "[fixed]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items())
    return text("s.toml", body if top is None else top)


GOOD_RECORD = {"run": {"world": "spiral", "objective": "lejepa", "seed": 0}, "status": "ok",
               "metrics": {"r2_h_to_z": 0.9, "orthogonality_error": 0.1}}


def records(bad):
    """d/sw/runs: one good run record and ``bad`` as b.json (text, or None: a directory)."""
    def build(d, fx):
        runs = d / "sw" / "runs"
        runs.mkdir(parents=True)
        (runs / "a.json").write_text(json.dumps(GOOD_RECORD))
        if bad is None:
            (runs / "b.json").mkdir()
        else:
            (runs / "b.json").write_text(bad)
    return build


AUDIT_E = ("audit", "{d}/e.safetensors", "--gauss-sims", "0")
TRAIN_R = ("train", "--world", "reacher", "--data", "{d}/r", "--epochs", "1", "--batch", "8",
           "--out", "{d}/o.safetensors", "--quiet")
SWEEP = ("sweep", "{d}/s.toml", "--out", "{d}/o", "--workers", "1")
REPORT = ("report", "{d}/sw", "--no-figures")
HUGE = "100000000000"

CASES = [  # (name, build, args, exit code before issue 18, after, fragment)
    # -- checkpoint metadata edited by hand
    ("checkpoint world 'pairs' without its file", world_as(name="pairs"), AUDIT_E, 5, 2,
     "world 'pairs': extra.data must be"),
    ("checkpoint reacher extra.data a number",
     world_as(name="reacher", extra={"data": 5, "dataset": RSPEC}), AUDIT_E, 5, 2,
     "world 'reacher': extra.data must be"),
    ("checkpoint pairs extra.data a list", world_as(name="pairs", extra={"data": ["p"]}),
     AUDIT_E, 5, 2, "world 'pairs': extra.data must be"),
    ("checkpoint reacher extra.dataset a string",
     world_as(name="reacher", extra={"data": "r", "dataset": "big"}), AUDIT_E, 2, 2,
     "extra.dataset must be"),
    ("checkpoint nested too deeply", edited_checkpoint("train", raw=DEEP), AUDIT_E, 5, 2,
     "nested too deeply"),
    ("checkpoint world nested too deeply", edited_checkpoint("world", raw=DEEP), AUDIT_E, 5, 2,
     "nested too deeply"),
    # -- a Reacher dataset's meta.json and chunks
    ("meta.json a list", reacher(raw="[]"), TRAIN_R, 5, 2, "meta.json must be a JSON object"),
    ("meta.json without spec", reacher(meta=pop("spec")), TRAIN_R, 5, 2,
     "meta.json lacks 'spec'"),
    ("meta.json without channel_mean", reacher(meta=pop("channel_mean")), TRAIN_R, 5, 2,
     "meta.json lacks 'channel_mean'"),
    ("meta.json with an unknown key", reacher(meta=put("colour", "red")), TRAIN_R, 0, 2,
     "meta.json has unknown fields ['colour']"),
    ("meta.json spec with an unknown key", reacher(meta=put("colour", "red", "spec")), TRAIN_R,
     5, 2, "meta.json: spec has unknown fields ['colour']"),
    ("meta.json image_size a string", reacher(meta=put("image_size", "x", "spec")), TRAIN_R, 5,
     2, "image_size must be an integer, got 'x'"),
    ("meta.json pairs a float", reacher(meta=put("pairs", 2.5, "spec")), TRAIN_R, 0, 2,
     "pairs must be an integer, got 2.5"),
    ("meta.json spec without pairs (its default: 100 000)", reacher(meta=pop("pairs", "spec")),
     TRAIN_R, 0, 2, "the train-*.npz chunks hold 24 rows, but meta.json says 100000"),
    ("meta.json channel_std a string", reacher(meta=put("channel_std", "abc")), TRAIN_R, 2, 2,
     "channel_std must be"),
    ("meta.json trajectory without rho_0", reacher(meta=trajectory_without_rho), TRAIN_R, 5, 2,
     "meta.json lacks 'rho_0'"),
    ("meta.json nested too deeply", reacher(raw=DEEP), TRAIN_R, 5, 2, "nested too deeply"),
    ("meta.json a directory", meta_dir, TRAIN_R, 5, 2, "meta.json is not a regular file"),
    ("dataset without chunks", reacher(chunks=no_chunks), TRAIN_R, 5, 2,
     "has no train-*.npz chunks"),
    ("object-dtype chunk", reacher(chunks=object_chunk), TRAIN_R, 5, 2,
     "train-00000.npz: cannot read"),
    ("chunk without z_prime", reacher(chunks=lambda f: f["train-00000.npz"].pop("z_prime")),
     TRAIN_R, 5, 2, "train-00000.npz: lacks the arrays ['z_prime']"),
    ("eval images of another size", reacher(chunks=eval_images_of_another_size), TRAIN_R, 5, 2,
     "eval-00000.npz: x has shape (12, 32, 32, 3)"),
    # -- JSON and TOML nested too deeply
    ("--arch-kwargs nested too deeply", nothing, ("audit", "{ck}", "--arch-kwargs", DEEP), 5, 2,
     "--arch-kwargs is nested too deeply"),
    ("--encoder-kwargs nested too deeply", nothing,
     ("train", "--encoder", "mlp", "--encoder-kwargs", DEEP, "--out", "{d}/o.safetensors"), 5,
     2, "--encoder-kwargs is nested too deeply"),
    ("plan --arch-kwargs nested too deeply", nothing, ("plan", "{ck}", "--arch-kwargs", DEEP),
     5, 2, "--arch-kwargs is nested too deeply"),
    ("gate TOML nested too deeply", text("g.toml", f"a = {DEEP}"),
     ("audit", "{ck}", "--gate", "{d}/g.toml"), 5, 2, "is nested too deeply"),
    ("suite TOML nested too deeply", text("s.toml", f"a = {DEEP}"), SWEEP, 5, 2,
     "is nested too deeply"),
    ("pairs file world nested too deeply", pairs_file_with(DEEP),
     ("train", "--data", "{d}/p.safetensors", "--epochs", "1", "--out", "{d}/o.safetensors"),
     5, 2, "nested too deeply"),
    ("run record nested too deeply", records(DEEP), REPORT, 5, 2, "nested too deeply"),
    # -- sizes that cannot fit in memory
    ("audit --n-eval 1e11", nothing, ("audit", "{ck}", "--n-eval", HUGE), 5, 2, "GiB"),
    ("consistency --n-eval 1e11", nothing, ("consistency", "{ck}", "{ck}", "--n-eval", HUGE), 5,
     2, "GiB"),
    ("train --n-eval 1e11", nothing, ("train", "--n-eval", HUGE, "--out", "{d}/o.safetensors"),
     5, 2, "GiB"),
    ("world --pairs 1e11", nothing, ("world", "spiral", "--pairs", HUGE, "--out",
                                     "{d}/p.safetensors"), 5, 2, "GiB"),
    ("plan --pairs 1e11", nothing, ("plan", "{ck}", "--pairs", HUGE), 5, 2, "GiB"),
    ("plan --gallery 1e11", nothing, ("plan", "{ck}", "--gallery", HUGE), 5, 2, "GiB"),
    ("train --steps 1e11", nothing, ("train", "--steps", HUGE, "--out", "{d}/o.safetensors"), 5,
     2, "GiB"),
    ("train --batch 1e11", nothing, ("train", "--batch", HUGE, "--out", "{d}/o.safetensors"), 5,
     2, "GiB"),
    ("world --pairs under a memory limit", nothing,
     ("LIMIT_AS", "world", "spiral", "--pairs", "100000000", "--out", "{d}/p.safetensors"), 5,
     2, "GiB"),
    # -- arrays
    ("x rows mismatch", npz(z=Z, h=Z, x=Z[:10]), ("audit", "{d}/a.npz"), 5, 2,
     "x has 10 rows but z has 400"),
    ("plan on h·1e300", npz(z=Z, h=Z * 1e300), ("plan", "{d}/a.npz"), 5, 2,
     "too large"),
    ("plan on zero rows", npz(z=np.zeros((0, 3)), h=np.zeros((0, 3))), ("plan", "{d}/a.npz"),
     5, 2, "z has no rows"),
    ("consistency on a 0-d .npy", npy(np.array(1.0), np.array(2.0)),
     ("consistency", "{d}/0.npy", "{d}/1.npy"), 5, 2, "must be a 2-D array"),
    ("consistency on zero rows", npy(np.zeros((0, 3)), np.zeros((0, 3))),
     ("consistency", "{d}/0.npy", "{d}/1.npy"), 5, 2, "has no rows"),
    ("consistency on 3-D h", npy(Z.reshape(400, 3, 1), Z.reshape(400, 1, 3)),
     ("consistency", "{d}/0.npy", "{d}/1.npy"), 0, 2, "must be a 2-D array"),
    ("consistency on zero columns", npy(np.zeros((400, 0)), Z),
     ("consistency", "{d}/0.npy", "{d}/1.npy"), 3, 2, "has no columns"),
    ("audit on zero rows", npz(z=np.zeros((0, 3)), h=np.zeros((0, 3))), ("audit", "{d}/a.npz"),
     3, 2, "z has no rows"),
    # -- sweep suites and --set
    ("suite steps a string", suite(steps="abc"), SWEEP, 5, 2,
     "steps must be an integer, got 'abc'"),
    ("suite lamb a string", suite(lamb="x"), SWEEP, 5, 2, "lamb must be a number, got 'x'"),
    ("suite dim a string", suite(world="coupling", dim="4"), SWEEP, 5, 2,
     "dim must be an integer, got '4'"),
    ("suite data a number", suite(data=5), SWEEP, 5, 2, "data must be a path, got 5"),
    ("suite fixed a number", suite(top="fixed = 5\n"), SWEEP, 5, 2, "[fixed] must be a table"),
    ("suite grid a string", suite(top='grid = "x"\n'), SWEEP, 2, 2, "[grid] must be a table"),
    ("suite rho a string", suite(rho="0.5"), SWEEP, 2, 2, "rho must be a number, got '0.5'"),
    ("suite recipe a list", suite(world="reacher", recipe=["cpu"]), SWEEP, 5, 2,
     "unknown recipe ['cpu']"),
    ("--set steps=abc", suite(), (*SWEEP, "--set", "steps=abc"), 5, 2,
     "steps must be an integer, got 'abc'"),
    ("--set batch=2.5", suite(), (*SWEEP, "--set", "batch=2.5"), 4, 2,
     "batch must be an integer, got 2.5"),
    ("--set device=5", suite(), (*SWEEP, "--set", "device=5"), 0, 2,
     "device does not apply to a sweep"),
    ("--set encoder_kwargs=x", suite(), (*SWEEP, "--set", "encoder_kwargs=x"), 0, 2,
     "--encoder-kwargs must be an object, got 'x'"),
    # -- run records read by `idaudit report`
    ("run record []", records("[]"), REPORT, 5, 2, "b.json must be a JSON object"),
    ("run record {}", records("{}"), REPORT, 5, 2, "b.json lacks 'run'"),
    ("run record with a non-numeric metric",
     records(json.dumps({**GOOD_RECORD, "metrics": {"r2_h_to_z": "high"}})), REPORT, 5, 2,
     "metric r2_h_to_z must be a number, got 'high'"),
    ("run record a directory", records(None), REPORT, 5, 2, "b.json is not a regular file"),
    # -- true latents and label-free files
    ("constant z", npz(z=np.ones((400, 3)), h=Z), ("audit", "{d}/a.npz", "--gauss-sims", "0"),
     0, 3, "the true latents z are constant"),
    ("circular in a label-free file",
     npz(h=Z, h_prime=Z, rho=np.array(0.9), circular=np.array([0])),
     ("audit", "{d}/a.npz", "--gauss-sims", "0"), 0, 2, "circular needs the true latents z"),
]


# ---- issue 27: no code from data, round 2 (the "before" codes: the tree before issue 27, f9e7eff;
# check them with IDAUDIT_BEFORE_27_SRC=/path/to/that/src) ------------------------------------

AUDIT4 = ("--world", "coupling", "--dim", "4", "--n-eval", "500", "--gauss-sims", "0")
VICTIM = "original\n"


def victim_and(build_rest):
    """d/victim.txt with known text, then ``build_rest(d)``; the test checks it unchanged."""
    def build(d, fx):
        (d / "victim.txt").write_text(VICTIM)
        build_rest(d)
    return build


def lewm_dir(**extra):
    def build(d):
        import torch

        (d / "lewm").mkdir()
        torch.save(torch.nn.Linear(4, 4).state_dict(), str(d / "lewm" / "weights.pt"))
        config = {"_target_": "torch.nn.Linear", "in_features": 4, "out_features": 4, **extra}
        (d / "lewm" / "config.json").write_text(json.dumps(config).replace("{d}", str(d)))
    return build


def scripted_from_file(d):
    import torch

    torch.jit.script(from_file_module(str(d / "victim.txt"))).save(str(d / "enc.pt"))


def weights(d):
    import torch

    torch.save(torch.nn.Linear(4, 4).state_dict(), str(d / "w.pt"))
    save_file(torch.nn.Linear(4, 4).state_dict(), str(d / "w.safetensors"))


def inflating_pt(d):
    """A torch.save zip whose data.pkl, deflated to about a MB, inflates to 1 GiB."""
    weights(d)
    inflating_pickle(d / "bomb.pt", d / "w.pt", 1 << 30)


def hf_dir(config, index=None):
    def build(d):
        (d / "hf").mkdir()
        (d / "hf" / "config.json").write_text(json.dumps(config))
        from safetensors.numpy import save_file as save_arrays

        save_arrays({"unrelated": np.zeros(2, np.float32)}, str(d / "hf" / "model.safetensors"))
        if index is not None:
            (d / "hf" / "model.safetensors.index.json").write_text(
                json.dumps({"metadata": {}, "weight_map": {"embeddings.x": index}}))
    return build


BERT = {"model_type": "bert", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 8, "vocab_size": 16}
HUGE_BERT = {**BERT, "hidden_size": 65536, "num_hidden_layers": 48, "num_attention_heads": 64,
             "intermediate_size": 65536}
OC_OPEN = "${oc.create:{_target_: builtins.open, file: {d}/victim.txt, mode: w}}"


class _RunsCode:
    """Unpickled in full, this runs ``touch d/marker`` (the stand-in for any code)."""

    def __init__(self, d):
        self.d = d

    def __reduce__(self):
        return os.system, (f"touch {self.d}/marker",)


def pickled_code(d):
    import torch

    torch.save({"w": torch.zeros(2), "hook": _RunsCode(d)}, str(d / "code.pt"))


def escaping_keys(d):
    """A key that would clear the screen and retitle the terminal, echoed raw before."""
    import torch

    torch.save({"\x1b[2J\x1b]0;pwned\x07evil": torch.zeros(2)}, str(d / "keys.pt"))


def hf_remote_code(d):
    hf_dir({"model_type": "evil", "hidden_size": 8,
            "auto_map": {"AutoConfig": "modeling_evil.EvilConfig",
                         "AutoModel": "modeling_evil.EvilModel"}})(d)
    (d / "hf" / "modeling_evil.py").write_text(f"open({str(d / 'marker')!r}, 'w')\n")

CASES_27 = [  # (name, build, args, exit code before issue 27, after, fragment)
    ("LeWM config.json: oc.create opens a file", victim_and(lewm_dir(bias=OC_OPEN)),
     ("audit", "{d}/lewm", *AUDIT4), 0, 2, "holds an interpolation"),
    ("TorchScript forward writes through torch.from_file", victim_and(scripted_from_file),
     ("audit", "{d}/enc.pt", *AUDIT4), 0, 2, "calls torch.from_file, which reaches files"),
    ("embed --out notes.txt", victim_and(lambda d: (d / "notes.txt").write_text(VICTIM)),
     ("embed", "{ck}", "--out", "{d}/notes.txt"), 2, 2, "--out must name an .npz"),
    ("--arch timm:hf-hub:ORG/NAME", victim_and(weights),
     ("audit", "{d}/w.safetensors", "--arch", "timm:hf-hub:someorg/somemodel", *AUDIT4), 2, 2,
     "sources such as hf-hub: or local-dir: are not taken"),
    ("--arch timm:local-dir:PATH", victim_and(weights),
     ("audit", "{d}/w.safetensors", "--arch", "timm:local-dir:{d}", *AUDIT4), 2, 2,
     "sources such as hf-hub: or local-dir: are not taken"),
    ("torch.save whose data.pkl inflates to 1 GiB", victim_and(inflating_pt),
     ("LIMIT_AS", "audit", "{d}/bomb.pt", "--arch", "torch.nn:Identity", *AUDIT4), 2, 2,
     "data.pkl is compressed"),
    ("Hugging Face config of a 77 GB network", victim_and(hf_dir(HUGE_BERT)),
     ("LIMIT_AS", "audit", "{d}/hf", *AUDIT4), 2, 2, "as its config.json describes it"),
    ("model.safetensors.index.json naming ../x", victim_and(hf_dir(BERT, "../victim.txt")),
     ("audit", "{d}/hf", *AUDIT4), 2, 2, "not a file of"),
    ("--normalize with a denormal std", victim_and(scripted_from_file),
     ("audit", "{d}/enc.pt", "--normalize", "0.5,1e-310", "--world", "reacher",
      "--image-size", "16"), 3, 2, "the std must be at least 1e-06"),
    ("state dict keys holding ANSI and OSC escapes", victim_and(escaping_keys),
     ("audit", "{d}/keys.pt", "--arch", "torch.nn:Identity", *AUDIT4), 2, 2,
     "unexpected keys (\\x1b[2J\\x1b]0;pwned\\x07evil)"),
    # the ones that held before issue 27 as well
    ("LeWM config.json: _target_ os.system",
     victim_and(lewm_dir(_target_="os.system", command="touch {d}/marker")),
     ("audit", "{d}/lewm", *AUDIT4), 2, 2, "_target_ 'os.system' is not in torch"),
    ("torch.save whose pickle calls os.system", victim_and(pickled_code),
     ("audit", "{d}/code.pt", "--arch", "torch.nn:Identity", *AUDIT4), 2, 2,
     "which torch.load(weights_only=True) refuses"),
    ("Hugging Face directory with remote code", victim_and(hf_remote_code),
     ("audit", "{d}/hf", *AUDIT4), 2, 2, "contains custom code"),
    ("embed --out onto its own target", victim_and(weights),
     ("embed", "{ck}", "--out", "{ck}"), 2, 2, "--out must name an .npz"),
    ("--cache-dir equal to --out", victim_and(weights),
     ("embed", "{ck}", "--world", "reacher", "--image-size", "16", "--out", "{d}/e.npz",
      "--cache-dir", "{d}/e.npz"), 2, 2, "is the same file as --cache-dir"),
]


def _args(args, d, fx):
    return [a.format(d=d, ck=fx.ck) if "{" in a and len(a) < 1000 else a for a in args]


@functools.cache
def _import_address_space() -> int:
    """Bytes of address space the CLI's imports take (a CUDA build of torch maps ≈ 3 GB of
    libraries before any work; the CPU build ≈ 0.6 GB)."""
    code = ("import torch, idaudit.cli\n"
            "print(open('/proc/self/status').read().split('VmPeak:')[1].split()[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return int(out.split()[-1]) << 10


def _limit_as(gib):
    """At most ``gib`` GiB of address space beyond what the imports take."""
    limit = _import_address_space() + (gib << 30)

    def preexec():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return preexec


def _subprocess(args, src=None):
    """Run the CLI in a fresh process (``src``: another source tree); ``LIMIT_AS`` first: under
    2 GiB of address space beyond the imports. Returns (exit code, stderr + stdout)."""
    limit = args[0] == "LIMIT_AS"
    args = args[1:] if limit else args
    env = {**os.environ, "PYTHONPATH": src} if src else dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "idaudit.cli", *args], capture_output=True,
                          text=True, env=env, preexec_fn=_limit_as(2) if limit else None,
                          timeout=600)
    return proc.returncode, proc.stderr + proc.stdout


@pytest.mark.parametrize("name,build,args,before,after,fragment", CASES + CASES_27,
                         ids=[c[0] for c in CASES + CASES_27])
def test_hostile_input(fx, tmp_path, name, build, args, before, after, fragment):
    build(tmp_path, fx)
    args = _args(args, tmp_path, fx)
    if args[0] == "LIMIT_AS":
        code, output = _subprocess(args)
        assert code == after, output
        lines = [ln for ln in output.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0], output
    else:
        one_line(run(*args), after, fragment)
    if (tmp_path / "victim.txt").exists():  # issue 27: no input or victim file touched
        assert (tmp_path / "victim.txt").read_text() == VICTIM
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize("env,cases", [("IDAUDIT_BEFORE_SRC", CASES),
                                       ("IDAUDIT_BEFORE_27_SRC", CASES_27)],
                         ids=["issue18", "issue27"])
def test_exit_codes_before(fx, tmp_path_factory, env, cases):
    """Every case against the old tree (``$env``: its src/, before issue 18 or 27) gives the
    "before" code the table records; prints the table (``pytest -s``), before → after."""
    src = os.environ.get(env)
    if not src:
        pytest.skip(f"set {env} to a source tree from before the issue")
    rows, wrong = ["| case | before | after |", "|---|---|---|"], []
    for name, build, args, before, after, _ in cases:
        d = tmp_path_factory.mktemp("before")
        build(d, fx)
        code, output = _subprocess(_args(args, d, fx), src)
        rows.append(f"| {name} | {code} | {after} |")
        if code != before:
            wrong.append(f"{name}: {code}, table says {before}: {output[-300:]}")
    print("\n".join(rows))
    assert not wrong, "\n".join(wrong)


def test_the_hand_written_reacher_dataset_trains(fx, tmp_path):
    """The builder's dataset is a valid one: the cases above each break one thing in it."""
    reacher()(tmp_path, fx)
    res = run(*_args(TRAIN_R, tmp_path, fx))
    assert res.exit_code == 0, res.output


def test_the_quick_suite_runs(fx, tmp_path):
    suite()(tmp_path, fx)
    res = run(*_args(SWEEP, tmp_path, fx))
    assert res.exit_code == 0, res.output
    records_dir = tmp_path / "sw"
    (records_dir / "runs").mkdir(parents=True)
    (records_dir / "runs" / "a.json").write_text(json.dumps(GOOD_RECORD))
    res = run("report", records_dir, "--no-figures")
    assert res.exit_code == 0, res.output
