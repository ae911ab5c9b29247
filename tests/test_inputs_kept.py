"""Nothing lost (issue 41): every file a command reads — named on the command line,
remembered by a checkpoint (its pairs file, its Reacher dataset, found relative to the
checkpoint as the loader finds it), named in a sweep TOML, imported by --arch, a sweep's
run records — is known before any output is touched, and no output may be one of them (the
same path, a hard link, a symbolic link) or lie inside an input directory. Each route below
deleted or changed an input, or wrote into one, before; then a seeded random search over
every command's outputs and inputs (exit 2 naming the clash, every input's sha256 kept)."""

import hashlib
import os
import random
import shutil
from pathlib import Path

import pytest
from conftest import one_line, run

from idaudit.core.errors import IdauditError

CLASH = "an output never"  # what every refusal of an output that is an input says


def digest(path: Path) -> str:
    """sha256 of a file, or of a directory's files (names and bytes), links followed."""
    h = hashlib.sha256()
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(str(f.relative_to(path)).encode() + b"\0" + f.read_bytes())
    else:
        h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A pairs file, a checkpoint trained on it (remembering ``../pairs.safetensors``) and a
    copy of it; a tiny Reacher dataset and a checkpoint trained on it; a gate file."""
    d = tmp_path_factory.mktemp("kept")
    pairs = d / "pairs.safetensors"
    assert run("world", "spiral", "--pairs", "400", "--out", pairs).exit_code == 0
    res = run("train", "--data", pairs, "--epochs", "1", "--out", d / "runs" / "ck.safetensors",
              "--quiet")
    assert res.exit_code == 0, res.output
    shutil.copy(d / "runs" / "ck.safetensors", d / "runs" / "ck2.safetensors")
    from idaudit.worlds.reacher import data as rd

    rd.build_dataset(d / "rdata", rd.ReacherSpec(mode="ou", rho=0.9, pairs=48, n_eval=30, seed=0),
                     workers=1)
    res = run("train", "--world", "reacher", "--rho", "0.9", "--pairs", "48", "--n-eval", "30",
              "--epochs", "1", "--batch", "16", "--data", d / "rdata", "--out",
              d / "rck" / "r.safetensors", "--quiet")
    assert res.exit_code == 0, res.output
    (d / "gate.toml").write_text("[min]\nr2_h_to_z_heldout = 0.1\n")
    return d


@pytest.fixture
def w(built, tmp_path):
    """A fresh copy of :func:`built` (its relative paths kept), and every input's digest."""
    d = tmp_path / "w"
    shutil.copytree(built, d, symlinks=True)
    return d


def kept(d: Path, before: dict[str, str]) -> bool:
    return all((d / name).exists() and digest(d / name) == h for name, h in before.items())


INPUTS = ("pairs.safetensors", "runs/ck.safetensors", "runs/ck2.safetensors", "rdata",
          "rck/r.safetensors", "gate.toml")


def digests(d: Path) -> dict[str, str]:
    return {name: digest(d / name) for name in INPUTS}


def test_a_checkpoint_remembers_its_pairs_file_relative_to_itself(w):
    from idaudit.models.checkpoint import checkpoint_world

    assert checkpoint_world(w / "runs" / "ck.safetensors").extra["data"] == \
        "../pairs.safetensors"
    assert checkpoint_world(w / "pairs.safetensors") is None  # a pairs file is no checkpoint


# ---- the routes that lost an input before --------------------------------------------------


@pytest.mark.parametrize("flag", ["--json", "--junit", "--markdown"])
def test_audit_plan_and_consistency_keep_the_pairs_file_a_checkpoint_remembers(w, flag,
                                                                               monkeypatch):
    """The issue's route: the checkpoint remembers ``../pairs.safetensors``; a report named
    ``pairs.safetensors`` (from the folder the user works in) deleted it, then failed."""
    monkeypatch.chdir(w)
    before = digests(w)
    ck = Path("runs/ck.safetensors")
    for args in (["audit", ck, flag, "pairs.safetensors"],
                 ["consistency", ck, "runs/ck2.safetensors", flag, "pairs.safetensors"]):
        one_line(run(*args), 2, f"{flag} pairs.safetensors: is the same file as the data "
                 f"{ck} was trained on")
    if flag == "--json":
        one_line(run("plan", ck, "--json", "pairs.safetensors"), 2, "was trained on")
        one_line(run("plan", ck, "--plot", "pairs.safetensors"), 2, "was trained on")
    assert kept(w, before)


def test_a_remembered_reacher_dataset_keeps_its_files_and_takes_no_new_ones(w):
    before = digests(w)
    rck, data = w / "rck" / "r.safetensors", w / "rdata"
    one_line(run("audit", rck, "--json", data / "meta.json"), 2, "is a file of the data")
    one_line(run("audit", rck, "--markdown", data / "train-00000.npz"), 2, CLASH)
    one_line(run("embed", rck, "--out", data / "eval-00000.npz"), 2, "is a file of the data")
    one_line(run("plan", rck, "--plot", data / "eval-00000.npz"), 2, CLASH)
    one_line(run("audit", rck, "--json", data / "new.json"), 2,
             "lies inside the data " + str(rck) + " was trained on")
    assert kept(w, before) and not (data / "new.json").exists()


def test_the_python_api_keeps_them_too(w):
    from idaudit.core.requests import EmbedRequest
    from idaudit.evaluations.pipeline import run_embed

    before = digests(w)
    chunk = w / "rdata" / "eval-00000.npz"
    with pytest.raises(IdauditError, match="is a file of the data"):
        run_embed(EmbedRequest(target=w / "rck" / "r.safetensors", out=chunk))
    hard = w / "hard.npz"
    os.link(w / "pairs.safetensors", hard)
    with pytest.raises(IdauditError, match="is the same file as the data"):
        run_embed(EmbedRequest(target=w / "runs" / "ck.safetensors", out=hard))
    import idaudit

    with pytest.raises(IdauditError, match="lies inside data"):
        idaudit.train(data=w / "rdata", out=w / "rdata" / "ck.safetensors", epochs=1)
    from idaudit.experiments.sweep import sweep

    suite = w / "suite.toml"
    suite.write_text(f'[fixed]\ndata = "{w / "rdata"}"\nepochs = 1\n[grid]\nseed = [0, 1]\n')
    with pytest.raises(IdauditError, match="lies inside a run's data"):
        sweep(suite, out=w / "rdata" / "sweep")
    assert kept(w, before) and not (w / "rdata" / "sweep").exists()


def test_train_and_sweep_write_nothing_into_their_data(w):
    before = digests(w)
    data = w / "rdata"
    one_line(run("train", "--data", data, "--out", data / "ck.safetensors", "--epochs", "1",
                 "--quiet"), 2, "--out " + str(data / "ck.safetensors") + ": lies inside --data")
    suite = w / "suite.toml"
    suite.write_text(f'[fixed]\ndata = "{data}"\nepochs = 1\n[grid]\nseed = [0, 1]\n')
    one_line(run("sweep", suite, "--out", data), 2, "is the same file as a run's data")
    one_line(run("sweep", suite, "--out", data / "sweep"), 2, "lies inside a run's data")
    one_line(run("sweep", suite, "--out", suite), 2, "is the same file as the suite file")
    assert kept(w, before) and not (data / "sweep").exists() and not (data / "runs").exists()


def test_a_sweep_never_writes_a_run_file_over_one_of_its_inputs(w):
    """A run's data at the path a sweep writes that run's checkpoint: refused before any run
    (exit 2), not a failed run (exit 4)."""
    from idaudit.experiments.sweep import run_id

    before = digests(w)
    pairs = w / "pairs.safetensors"
    suite = w / "suite.toml"
    suite.write_text(f'[fixed]\ndata = "{pairs}"\nepochs = 1\n')
    rid = run_id({"data": str(pairs), "epochs": 1})
    out = w / "sw"
    (out / "checkpoints").mkdir(parents=True)
    os.link(pairs, out / "checkpoints" / f"{rid}.safetensors")
    one_line(run("sweep", suite, "--out", out, "--checkpoints"), 2,
             f"--out (a run's checkpoint) {out / 'checkpoints' / rid}.safetensors: is the "
             "same file as a run's data")
    assert kept(w, before) and not (out / "runs").exists()


def test_report_never_replaces_a_run_record(tmp_path):
    """A run record reached through a link to the summary the report writes: the record
    (the report's input) was replaced by the table. A symbolic link is no record at all (never
    followed, issue 54); a hard link is the same file as an output."""
    from idaudit.experiments.sweep import run_sweep

    out = tmp_path / "sw"
    run_sweep([{"world": "spiral", "steps": 20, "eval_every": 20, "n_eval": 300}], out,
              workers=1)
    record = next((out / "runs").glob("*.json"))
    for table in ("summary.md", "summary.csv"):
        for hard in (False, True):
            shutil.move(record, out / table)
            if hard:
                os.link(out / table, record)
                refusal = f"the table {out / table}: is the same file as the run record"
            else:
                record.symlink_to(Path("..") / table)
                refusal = f"{record} is a symbolic link (records are never followed)"
            before = digest(record)
            one_line(run("report", out, "--no-figures"), 2, refusal)
            assert digest(record) == before
            record.unlink()
            shutil.move(out / table, record)
    os.link(record, out / "figures.png")  # a file that is no output of the report
    assert run("report", out, "--no-figures").exit_code == 0
    assert (out / "summary.md").is_file() and digest(out / "figures.png") == digest(record)


def test_the_module_arch_imports_is_an_input(w, monkeypatch):
    """``--arch kept41:make`` imports kept41.py from the working directory: a report named
    kept41.py deleted it, then failed to import it."""
    import torch
    from safetensors.torch import save_file

    monkeypatch.chdir(w)
    Path("kept41.py").write_text("import torch\n\n\ndef make():\n    return torch.nn.Linear(2, 2)\n")
    save_file(torch.nn.Linear(2, 2).state_dict(), "weights.safetensors")
    before = digest(w / "kept41.py")
    one_line(run("audit", "weights.safetensors", "--arch", "kept41:make", "--world", "spiral",
                 "--json", "kept41.py"), 2,
             "--json kept41.py: is the same file as the module --arch imports")
    assert digest(w / "kept41.py") == before


# ---- a random search: outputs chosen among each command's inputs ----------------------------


def _clash_path(rng: random.Random, d: Path, name: str, suffix: str | None) -> Path:
    """A path that names input ``d/name``: itself, by a detour, a symbolic or a hard link,
    or (a directory) itself or a file in it, existing or new, directly or through a link;
    with ``suffix`` only names ending so."""
    inp = d / name
    tag = f"{rng.randrange(10**9)}"
    if inp.is_dir():
        files = sorted(p for p in inp.iterdir() if p.is_file())
        choices = [p for p in files if suffix is None or p.suffix == suffix]
        choices.append(inp / f"new{tag}{suffix or '.json'}")
        link = d / f"dirlink{tag}"
        link.symlink_to(inp)
        choices.append(link / f"new{tag}{suffix or '.json'}")  # inside it, through a link
        if suffix is None:
            choices.append(inp)
        return rng.choice(choices)
    styles = ["link", "hard"] + ([] if suffix is not None and inp.suffix != suffix
                                 else ["same", "detour"])
    style = rng.choice(styles)
    if style == "same":
        return inp
    if style == "detour":
        (d / "sub").mkdir(exist_ok=True)
        return d / "sub" / ".." / name
    link = d / f"{style}{tag}{suffix or inp.suffix}"
    if style == "link":
        link.symlink_to(inp)
    else:
        os.link(inp, link)
    return link


#: command → (arguments before the outputs, its inputs (explicit and remembered), its output
#: flags, the suffix its outputs must have)
COMMANDS = {
    "audit": (["audit", "runs/ck.safetensors", "--gate", "gate.toml"],
              ["runs/ck.safetensors", "pairs.safetensors", "gate.toml"],
              ["--json", "--junit", "--markdown"], None),
    "audit reacher": (["audit", "rck/r.safetensors"], ["rck/r.safetensors", "rdata"],
                      ["--json", "--junit", "--markdown"], None),
    "consistency": (["consistency", "runs/ck.safetensors", "runs/ck2.safetensors"],
                    ["runs/ck.safetensors", "runs/ck2.safetensors", "pairs.safetensors"],
                    ["--json", "--junit", "--markdown"], None),
    "plan": (["plan", "runs/ck.safetensors"], ["runs/ck.safetensors", "pairs.safetensors"],
             ["--json", "--plot"], None),
    "plan reacher": (["plan", "rck/r.safetensors"], ["rck/r.safetensors", "rdata"],
                     ["--json", "--plot"], None),
    "embed": (["embed", "runs/ck.safetensors"], ["runs/ck.safetensors", "pairs.safetensors"],
              ["--out"], ".npz"),
    "embed reacher": (["embed", "rck/r.safetensors"], ["rck/r.safetensors", "rdata"],
                      ["--out"], ".npz"),
    "train": (["train", "--data", "pairs.safetensors", "--epochs", "1", "--quiet"],
              ["pairs.safetensors"], ["--out"], None),
    "train reacher": (["train", "--data", "rdata", "--epochs", "1", "--quiet"], ["rdata"],
                      ["--out"], None),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_random_outputs_among_the_inputs_never_touch_them(w, command, monkeypatch):
    """Each trial points a random non-empty set of the command's outputs at its inputs
    (the rest at fresh paths): exit 2 naming a clash, every input's sha256 as before."""
    monkeypatch.chdir(w)
    args, inputs, flags, suffix = COMMANDS[command]
    rng = random.Random(f"41 {command}")
    before = digests(w)
    for trial in range(6):
        chosen = rng.sample(flags, rng.randint(1, len(flags)))
        outs = []
        for flag in flags:
            if flag in chosen:
                path = _clash_path(rng, w, rng.choice(inputs), suffix)
            else:
                path = w / "fresh" / f"{trial}{flag.strip('-')}{suffix or '.out'}"
            outs += [flag, path]
        res = run(*args, *outs)
        one_line(res, 2, CLASH)
        assert any(f"{flag} " in res.output for flag in chosen), res.output
        assert kept(w, before), (command, outs)
        assert not (w / "fresh").exists()


def test_random_sweep_outputs_among_its_inputs_never_touch_them(w, monkeypatch):
    """A sweep's --out among its suite file and its runs' data (a pairs file, a Reacher
    dataset), by every kind of name."""
    monkeypatch.chdir(w)
    rng = random.Random("41 sweep")
    before = digests(w)
    for trial in range(8):
        data = rng.choice(["pairs.safetensors", "rdata"])
        suite = w / f"suite{trial}.toml"
        suite.write_text(f'[fixed]\ndata = "{data}"\nepochs = 1\n[grid]\nseed = [0, 1]\n')
        before_suite = digest(suite)
        target = rng.choice([data, suite.name])
        out = _clash_path(rng, w, target, None)
        if out.suffix == ".json":
            out = out.with_suffix("")  # a new directory inside the dataset
        one_line(run("sweep", suite, "--out", out), 2, CLASH)
        assert kept(w, before) and digest(suite) == before_suite
