"""idaudit.lightning.IdentifiabilityMonitor in real Lightning runs on the CPU.

A tiny encoder learns the spiral world's pairs (x, x′) (idaudit's own world, objective
"whiten") for a few epochs with a CSVLogger; the monitor reads the validation step's dict
({"embedding", "embedding_prime"}) and the batch's true latents "z". The logged metrics are
checked, epoch by epoch, against scikit-learn and NumPy on the very rows the monitor queued;
a gate missed by epoch N stops the run at N, or raises with action="fail". The same monitor
then watches a stable-pretraining ``Module`` (its ``forward(batch, stage)`` dict), where that
package is installed (the "users" venv of .ci/run).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shlex
import subprocess
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import why_not_importable

L = pytest.importorskip("lightning", reason="the lightning extra (pip install "
                        f"'idaudit[lightning]'): {why_not_importable('lightning')}")

from lightning.pytorch.loggers import CSVLogger  # noqa: E402
from torch import nn  # noqa: E402

import idaudit  # noqa: E402
from idaudit.core.errors import EXIT_GATE_FAILED, IdauditError  # noqa: E402
from idaudit.lightning import IdentifiabilityMonitor, RowQueue  # noqa: E402
from idaudit.maths.losses import objective_for  # noqa: E402
from idaudit.maths.moments import split_rows  # noqa: E402

WORLD = idaudit.build_world(idaudit.make_spec("spiral"))
N_TRAIN, N_VAL, BATCH, WIDTH = 2048, 1024, 256, 8
EPOCHS = 3
MAX_ROWS = 768  # fewer than the validation set: the first 256 rows are dropped


class Pairs(torch.utils.data.Dataset):
    """``n`` OU pairs of the world as dicts {"x", "x_prime", "z"}, drawn from ``seed``."""

    def __init__(self, n: int, seed: int) -> None:
        z, zp = WORLD.sample_pairs(n, torch.Generator().manual_seed(seed))
        self.z, self.x, self.xp = z, WORLD.observe(z), WORLD.observe(zp)

    def __len__(self) -> int:
        return len(self.z)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "x_prime": self.xp[i], "z": self.z[i]}


TRAIN, VAL = Pairs(N_TRAIN, 1), Pairs(N_VAL, 2)


def encoder(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, WIDTH))


def pair_step(net: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """stable-pretraining's convention: the step's outputs as a dict."""
    h, hp = net(batch["x"]), net(batch["x_prime"])
    loss, _ = objective_for("whiten")(torch.stack([h, hp]), lamb=0.5, sigma=1.0,
                                      directions=None)
    return {"embedding": h, "embedding_prime": hp, "loss": loss}


class PairModule(L.LightningModule):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.net = encoder(seed)

    def forward(self, batch, stage):
        return pair_step(self.net, batch)

    def training_step(self, batch, batch_idx):
        return self(batch, "fit")["loss"]

    def validation_step(self, batch, batch_idx):
        return self(batch, "validate")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=3e-3)


class Recorder(L.Callback):
    """After the monitors (callbacks run in list order): each validation's queued rows and
    logged metrics, per monitor."""

    def __init__(self, *monitors: IdentifiabilityMonitor) -> None:
        self.monitors, self.seen = monitors, []

    def on_validation_epoch_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.seen.append((trainer.current_epoch,
                              [(m.queue.arrays(), dict(m.metrics)) for m in self.monitors]))


def fit(module, callbacks, tmp_path: Path, epochs: int = EPOCHS):
    trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1,
                        logger=CSVLogger(tmp_path, name="run"), callbacks=callbacks,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=1,
                        log_every_n_steps=1)
    train = torch.utils.data.DataLoader(TRAIN, batch_size=BATCH, shuffle=True,
                                        generator=torch.Generator().manual_seed(3))
    val = torch.utils.data.DataLoader(VAL, batch_size=BATCH)
    trainer.fit(module, train, val)
    return trainer


def logged(trainer) -> list[dict[str, str]]:
    """The rows of the CSVLogger's metrics.csv."""
    with open(Path(trainer.logger.log_dir) / "metrics.csv") as f:
        return list(csv.DictReader(f))


def sklearn_r2(h: np.ndarray, z: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """In-sample R²(h → z) and held-out R² on the audit's split (half the rows), by
    scikit-learn."""
    from sklearn.linear_model import LinearRegression

    h, z = h.astype(np.float64), z.astype(np.float64)
    test, train = split_rows(len(h), 0.5, seed)
    in_sample = LinearRegression().fit(h, z).score(h, z)
    heldout = LinearRegression().fit(h[train], z[train]).score(h[test], z[test])
    return in_sample, heldout


def test_import_idaudit_loads_no_lightning():
    code = "import sys, idaudit; print(sorted({'lightning', 'torch'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_without_lightning_the_module_imports_and_the_monitor_says_what_to_install():
    code = ("import sys; sys.modules['lightning'] = None\n"  # lightning made unimportable
            "from idaudit.lightning import IdentifiabilityMonitor\n"
            "try:\n    IdentifiabilityMonitor()\n"
            "except ValueError as exc:\n    print(type(exc).__name__, exc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("UsageError IdentifiabilityMonitor needs the lightning package "
                          "(pip install 'idaudit[lightning]'): ModuleNotFoundError")
    assert out.count("\n") == 1


def test_row_queue_keeps_the_last_rows():
    q = RowQueue(5)
    for start in (0, 3, 6):
        q.add({"h": np.arange(start, start + 3, dtype=np.float32)[:, None]})
    assert q.arrays()["h"][:, 0].tolist() == [4, 5, 6, 7, 8]
    assert q.rows == 5
    with pytest.raises(IdauditError, match="same keys"):
        q.add({"h": np.zeros((1, 1)), "z": np.zeros((1, 1))})


@pytest.mark.parametrize("kwargs, message", [
    ({"gate": {"r2_h_to_z_heldoot": 0.9}}, "unknown metric 'r2_h_to_z_heldoot'"),
    ({"gate": {"r2_h_to_z_heldout": 0.9}, "latents_key": None},
     "r2_h_to_z_heldout needs the true latents z"),
    ({"gate": {"D": 0.1}, "pair_key": "embedding_prime"}, "D needs ρ"),
    ({"gate": {"r2_h_to_z_heldout_above_floor": 0.1}, "floor_draws": 0}, "needs floor_draws"),
    ({"gate": {"n_samples": 100}}, "neither better higher nor lower"),
    ({"gate": {"r2_h_to_z_heldout": "0.9"}}, "must be a number"),
    ({"gate": {"r2_h_to_z_heldout": 0.9}, "action": "warn"}, "action must be 'stop' or 'fail'"),
    ({"gate": {"r2_h_to_z_heldout": 0.9}, "by_epoch": -1}, "by_epoch must be a non-negative integer"),
    ({"by_epoch": 3}, "by_epoch applies to a gate"),
    ({"rho": 0.9}, "it needs pair_key"),
    ({"max_rows": 5}, "max_rows must be an integer ≥ 10"),
    ({"latents_key": None, "floor_draws": 10}, "floor_draws needs the true latents"),
    ({"figures_every": 2}, "figures_every applies to log_figures=True"),
    ({"log_figures": True, "figures_every": 0}, "figures_every must be an integer >= 1"),
    ({"log_figures": "yes"}, "log_figures must be True or False"),
])
def test_refused_when_made(kwargs, message):
    with pytest.raises(IdauditError, match=message) as info:
        IdentifiabilityMonitor(**kwargs)
    assert "\n" not in str(info.value)


def test_gate_takes_each_metric_s_direction():
    m = IdentifiabilityMonitor(gate={"r2_h_to_z_heldout": 0.9, "orthogonality_error": 0.2})
    assert [(t.metric, t.op, t.value) for t in m.thresholds] == [
        ("r2_h_to_z_heldout", "min", 0.9), ("orthogonality_error", "max", 0.2)]
    m = IdentifiabilityMonitor(gate={"max": {"n_samples": 10_000}})
    assert [(t.metric, t.op) for t in m.thresholds] == [("n_samples", "max")]


def check_logged(trainer, rec: Recorder, prefixes: list[str], epochs: int) -> None:
    """At every validation epoch: the queue holds the last MAX_ROWS validation rows; the
    monitor's R²s agree with scikit-learn's and ε with NumPy's on those rows; the CSV holds
    every number each monitor computed, finite, under its prefix."""
    assert [epoch for epoch, _ in rec.seen] == list(range(epochs))  # not the sanity check
    rows = [r for r in logged(trainer) if r.get(prefixes[0] + "n_samples")]
    assert [int(r["epoch"]) for r in rows] == list(range(epochs))
    for (epoch, seen), row in zip(rec.seen, rows):
        assert int(row["epoch"]) == epoch
        for (q, metrics), prefix in zip(seen, prefixes):
            assert q["h"].shape == (MAX_ROWS, WIDTH)
            h = q["h"].astype(np.float64)
            eps = np.linalg.norm(np.cov(h, rowvar=False) - np.eye(WIDTH))
            assert metrics["whitening_error"] == pytest.approx(eps, rel=1e-6)
            assert metrics["n_samples"] == MAX_ROWS
            if "z" in q:
                assert np.array_equal(q["z"], VAL.z[N_VAL - MAX_ROWS:].numpy())
                in_sample, heldout = sklearn_r2(q["h"], q["z"])
                assert metrics["r2_h_to_z"] == pytest.approx(in_sample, abs=1e-6)
                assert metrics["r2_h_to_z_heldout"] == pytest.approx(heldout, abs=1e-6)
            names = {k[len(prefix):] for k, v in row.items() if k.startswith(prefix) and v}
            assert names == set(metrics)
            for k, v in metrics.items():
                assert math.isfinite(float(row[prefix + k]))
                assert float(row[prefix + k]) == pytest.approx(v, rel=1e-6, abs=1e-6)


def test_logged_metrics_match_an_independent_computation(tmp_path):
    with_z = IdentifiabilityMonitor(pair_key="embedding_prime", rho=WORLD.rho, max_rows=MAX_ROWS)
    label_free = IdentifiabilityMonitor(latents_key=None, pair_key="embedding_prime",
                                        max_rows=MAX_ROWS, prefix="labelfree/")
    rec = Recorder(with_z, label_free)
    trainer = fit(PairModule(), [with_z, label_free, rec], tmp_path)
    check_logged(trainer, rec, ["idaudit/", "labelfree/"], EPOCHS)
    r2_heldout = []
    for _, [(q, metrics), (q_lf, metrics_lf)] in rec.seen:
        assert np.array_equal(q_lf["h"], q["h"]) and set(q_lf) == {"h", "h_prime"}
        # the label-free pair signals join the audit with z; the label-free monitor has no z
        assert metrics["rho_estimated"] == pytest.approx(metrics_lf["rho_estimated"], rel=1e-9)
        assert "r2_h_to_z" not in metrics_lf and metrics_lf["label_free"] == 1.0
        assert {"bound", "D", "canonical_shortfall", "mcc", "r2_h_to_z_heldout_above_floor"} \
            <= set(metrics)
        r2_heldout.append(metrics["r2_h_to_z_heldout"])
    assert len(set(r2_heldout)) == EPOCHS  # a new audit each epoch, of the weights then


@pytest.mark.parametrize("action", ["stop", "fail"])
def test_a_missed_gate_stops_or_fails_at_by_epoch(tmp_path, action):
    # R² ≤ 1: a threshold above it is missed at every epoch, but acted on from epoch 1 only
    monitor = IdentifiabilityMonitor(gate={"r2_h_to_z_heldout": 1.01}, by_epoch=1,
                                     action=action, max_rows=MAX_ROWS)
    if action == "fail":
        with pytest.raises(IdauditError, match=r"gate missed at epoch 1 \(by_epoch 1\): "
                           r"r2_h_to_z_heldout = 0\.\d+ \(needs ≥ 1\.01\)") as info:
            fit(PairModule(), [monitor], tmp_path, epochs=5)
        assert info.value.exit_code == EXIT_GATE_FAILED
        assert monitor.stopped_epoch == 1
        return
    trainer = fit(PairModule(), [monitor], tmp_path, epochs=5)
    assert monitor.stopped_epoch == 1
    assert "r2_h_to_z_heldout" in monitor.stop_reason and "1.01" in monitor.stop_reason
    assert trainer.current_epoch == 2  # epoch 1 ran to its end, epoch 2 never started
    epochs = [int(r["epoch"]) for r in logged(trainer) if r.get("idaudit/r2_h_to_z_heldout")]
    assert epochs == [0, 1]


def test_a_met_gate_lets_the_run_finish(tmp_path):
    monitor = IdentifiabilityMonitor(gate={"r2_h_to_z_heldout": -1.0}, max_rows=MAX_ROWS)
    trainer = fit(PairModule(), [monitor], tmp_path, epochs=2)
    assert monitor.stopped_epoch is None and trainer.current_epoch == 2


class ImageLogger(L.pytorch.loggers.Logger):
    """A Lightning logger that takes images (as Weights & Biases' and Neptune's do): keeps
    each (key, image, step) it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[tuple[str, np.ndarray, int]] = []

    @property
    def name(self) -> str:
        return "images"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics, step=None) -> None:
        pass

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_image(self, key, images, step=None, **kwargs) -> None:
        self.images += [(key, image, step) for image in images]


def drawn_from(rows, metrics_monitor, title: str) -> np.ndarray:
    """The figure of an audit of the queued ``rows``, drawn here as the page draws it, titled
    ``title``."""
    import dataclasses

    from idaudit.evaluations.figures import Drawn, audit_figure, rgb_array
    from idaudit.evaluations.inputs import AuditInputs

    report = idaudit.audit(rows["z"], rows["h"], rows["h_prime"], WORLD.rho,
                           seed=metrics_monitor.seed)
    report = dataclasses.replace(report, source=title)
    inp = AuditInputs(z=rows["z"], h=rows["h"], h_prime=rows["h_prime"], rho=WORLD.rho)
    return rgb_array(audit_figure([Drawn(inp, report, metrics_monitor.seed)]))


def test_figures_go_to_tensorboard_and_image_loggers_every_k_validations(tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("tensorboard", reason="the dev extra's tensorboard")
    from lightning.pytorch.loggers import TensorBoardLogger
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monitor = IdentifiabilityMonitor(pair_key="embedding_prime", rho=WORLD.rho,
                                     max_rows=MAX_ROWS, log_figures=True, figures_every=2)
    rec = Recorder(monitor)
    global_steps = []

    class Steps(L.Callback):
        def on_validation_epoch_end(self, trainer, pl_module):
            if not trainer.sanity_checking:
                global_steps.append(trainer.global_step)

    tb, images = TensorBoardLogger(tmp_path, name="tb"), ImageLogger()
    trainer = L.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=1, logger=[tb, images],
                        callbacks=[monitor, rec, Steps()], enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=1, log_every_n_steps=1)
    trainer.fit(PairModule(), torch.utils.data.DataLoader(TRAIN, batch_size=BATCH),
                torch.utils.data.DataLoader(VAL, batch_size=BATCH))
    tb.experiment.flush()
    events = EventAccumulator(tb.log_dir, size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    # the validations' scalars, as Lightning logged them: one step behind the global step
    steps = [e.step for e in events.Scalars("idaudit/r2_h_to_z_heldout")]
    per_epoch = len(TRAIN) // BATCH
    assert steps == [per_epoch * (e + 1) - 1 for e in range(EPOCHS)]
    assert global_steps == [s + 1 for s in steps]
    # validations 0, 1, 2: drawn at the first and every second after, at their scalars' steps
    assert [(key, step) for key, _, step in images.images] == [
        ("idaudit/figure", steps[0]), ("idaudit/figure", steps[2])]
    got = events.Images("idaudit/figure")
    assert [e.step for e in got] == [steps[0], steps[2]]
    # titled with the run as TensorBoard names it (not "arrays"), the epoch and the step
    run = f"tb/version_{tb.version}"
    assert tb.log_dir.endswith(run.replace("/", os.sep))
    assert monitor.figure_title == f"{run} · epoch 2 · step {steps[2]}"
    last_rows = rec.seen[2][1][0][0]
    want = drawn_from(last_rows, monitor, monitor.figure_title)
    assert np.array_equal(images.images[1][1], want)  # the audit of the rows it queued
    assert np.array_equal(monitor.figure, want)
    assert not np.array_equal(want, drawn_from(last_rows, monitor, "arrays"))  # the title shows
    assert not np.array_equal(images.images[0][1], want)  # a new figure of newer weights
    png = np.asarray(Image.open(io.BytesIO(got[1].encoded_image_string)).convert("RGB"))
    assert np.array_equal(png, want)  # TensorBoard's image is the figure, pixel for pixel


def test_a_validation_without_rows_draws_nothing_and_resends_nothing():
    """An audit of an empty queue has no figure: _decide must neither fail on it nor send the
    previous validation's figure again under the new step."""
    pytest.importorskip("matplotlib")
    images = ImageLogger()
    trainer = L.Trainer(logger=[images], accelerator="cpu", devices=1,
                        enable_progress_bar=False, enable_model_summary=False)
    monitor = IdentifiabilityMonitor(max_rows=MAX_ROWS, log_figures=True)
    assert monitor._decide(trainer) is None  # the first validation, nothing queued
    assert images.images == [] and monitor.figure is None
    rng = np.random.default_rng(0)
    z = rng.standard_normal((200, 2)).astype(np.float32)
    monitor.queue.add({"z": z, "h": z @ np.array([[0.0, 1.0], [-1.0, 0.0]], np.float32)})
    monitor._decide(trainer)
    assert len(images.images) == 1
    assert monitor.metrics["r2_h_to_z_heldout"] == pytest.approx(1.0)  # a rotation of z
    monitor.queue.clear()
    monitor._decide(trainer)  # the next validation queued nothing: no second image
    assert len(images.images) == 1


def test_a_step_without_the_embedding_is_one_line(tmp_path):
    class NoDict(PairModule):
        def validation_step(self, batch, batch_idx):
            return self(batch, "validate")["loss"]

    with pytest.raises(IdauditError, match="must return a dict holding the embedding under "
                       "'embedding'; it returned Tensor"):
        fit(NoDict(), [IdentifiabilityMonitor()], tmp_path, epochs=1)


def test_a_stable_pretraining_module(tmp_path):
    """stable-pretraining's Module: a forward(batch, stage) bound to it returns the dict; the
    monitor reads it, logs through the module, and stops the run at by_epoch."""
    spt = pytest.importorskip("stable_pretraining", reason="stable-pretraining (the users venv "
                              f"of .ci/run): {why_not_importable('stable_pretraining')}")

    def forward(self, batch, stage):
        out = pair_step(self.backbone, batch)
        out["z"] = batch["z"]  # as its forwards hand "label" on to callbacks
        return out

    module = spt.Module(forward=forward, backbone=encoder(0),
                        optim={"optimizer": {"type": "Adam", "lr": 3e-3}})
    monitor = IdentifiabilityMonitor(pair_key="embedding_prime", rho=WORLD.rho,
                                     max_rows=MAX_ROWS, gate={"r2_h_to_z_heldout": 1.01},
                                     by_epoch=1)
    rec = Recorder(monitor)
    before = set(threading.enumerate())
    trainer = fit(module, [monitor, rec], tmp_path, epochs=4)
    for thread in set(threading.enumerate()) - before:  # stable-pretraining's environment
        thread.join(timeout=60)  # dump, which logs when done: not after pytest's capture ends
    assert monitor.stopped_epoch == 1 and trainer.current_epoch == 2
    check_logged(trainer, rec, ["idaudit/"], 2)


def test_the_guide_s_example_runs_as_it_says(tmp_path, monkeypatch, capsys):
    """docs/lightning.md's example, run as written: the line it prints (its numbers within
    the spread another CPU's kernels give them, tests/rounding.py; the epochs and the gate
    exactly) and the 49 columns it says the CSV gets."""
    import rounding
    from test_doc_examples import doc_env

    example = rounding.EXAMPLES["lightning"]
    (tmp_path / "example.py").write_text(example.code())
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900, env=doc_env("docs/lightning.md",
                                                              "import lightning as L"))
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.strip().splitlines()[-1]
    rounding.check_printed("lightning", printed + "\n")
    with open(tmp_path / "logs" / "lightning_logs" / "version_0" / "metrics.csv") as f:
        header = next(csv.reader(f))
    assert sum(k.startswith("idaudit/") for k in header) == 52


def doc_block(first_line: str, lang: str = "python") -> str:
    """The block of docs/lightning.md whose first line is ``first_line``."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "lightning.md").read_text()
    found = [b for b in text.split(f"```{lang}\n")[1:] if b.startswith(first_line)]
    assert len(found) == 1, first_line
    return found[0].split("```", 1)[0]


def test_the_documented_command_gives_the_monitor_s_numbers(tmp_path, monkeypatch, capsys):
    """docs/lightning.md's EvalRows example, run as written (2 epochs): the rows it names and
    the command it prints are the doc's; that command (the doc's bash block, with --json
    added), run through the CLI on the checkpoint ModelCheckpoint saved, reports every
    number it shares with the monitor's last audit exactly; the rows and the command are in
    the CSV logger's hparams.yaml. On the rows of another stream (world_pairs, as the first
    example validates) the numbers differ, and the monitor says no command gives them."""
    from conftest import run
    from test_doc_examples import run_python

    from idaudit.lightning import EvalRows

    (tmp_path / "encoders.py").write_text(doc_block("# encoders.py"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    ran = run_python("docs/lightning.md", "import shlex", tmp_path, after=(
        "import json, pathlib\npathlib.Path('_monitor.json').write_text(json.dumps("
        "{'metrics': monitor.metrics, 'rows': monitor.rows}))"))
    monitor = types.SimpleNamespace(**json.loads((tmp_path / "_monitor.json").read_text()))
    printed = ran.stdout.strip().splitlines()[-2:]
    assert printed == doc_block("validation loader 0:", "text").strip().splitlines()
    command = doc_block("idaudit audit", "bash").strip()
    assert printed[1] == command
    assert monitor.rows == {"text": printed[0], "exact": True, "why_not": None}
    words = shlex.split(command)
    assert words[0] == "idaudit" and (tmp_path / words[2]).is_file()
    res = run(*words[1:], "--json", "audit.json")
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "audit.json").read_text())["metrics"]
    shared = sorted(k for k in got if k in monitor.metrics)
    assert len(shared) == 45 and {"r2_h_to_z_heldout", "procrustes_mse", "orthogonality_error",
                                  "bound", "whitening_error", "mcc"} <= set(shared)
    for k in shared:
        assert float(got[k]) == pytest.approx(monitor.metrics[k], rel=1e-6, abs=1e-12), k
    logged = next((tmp_path / "logs" / "lightning_logs").glob("version_*/hparams.yaml"))
    hparams = logged.read_text()
    assert " ".join(hparams.split()).count(printed[0]) == 1
    assert "idaudit/command: idaudit audit CHECKPOINT.ckpt --key state_dict --prefix " \
        "ATTRIBUTE. --arch MODULE:FACTORY --world spiral --n-eval 1024 --seed 0" in \
        " ".join(hparams.split())

    # the same encoder audited on world_pairs' rows: other rows, other numbers, and no command
    pairs = idaudit.world_pairs("spiral", 1024, 0)
    assert not torch.equal(pairs.z, EvalRows("spiral", n=1024, seed=0).eval.z)
    other = IdentifiabilityMonitor(pair_key="embedding_prime", rho=WORLD.rho)
    done: dict = {}  # the block's definitions (its class Encoder), without its training
    exec(compile(doc_block("import shlex").split("\ntrain = ")[0], "docs/lightning.md", "exec"),
         done)
    net = done["Encoder"]()
    net.load_state_dict(torch.load(words[2], weights_only=True)["state_dict"])
    loader = torch.utils.data.DataLoader([{"x": pairs.x[i], "x_prime": pairs.x_prime[i],
                                           "z": pairs.z[i]} for i in range(1024)], batch_size=256)
    L.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=[other],
              enable_progress_bar=False, enable_model_summary=False).validate(net, loader)
    assert other.rows["exact"] is False
    assert other.rows["text"].startswith("validation loader 0: the last 1024 validation rows")
    assert abs(other.metrics["r2_h_to_z_heldout"] - got["r2_h_to_z_heldout"]) > 1e-3
    with pytest.raises(IdauditError, match="no idaudit command audits the rows the monitor "
                       "did: the validation set is not an idaudit.lightning.EvalRows") as info:
        other.commands("last.ckpt", "encoders:network")
    assert "\n" not in str(info.value)


def test_eval_rows_are_the_world_s_evaluation_set_and_refuse_in_one_line():
    from idaudit.lightning import EvalRows

    rows = EvalRows("spiral", n=300, seed=4, rho=0.9)
    ev = idaudit.build_world(idaudit.make_spec("spiral", rho=0.9)).eval_set(300, 4)
    assert len(rows) == 300 and torch.equal(rows[7]["z"], ev.z[7])
    assert torch.equal(rows[7]["x_prime"], ev.x_prime[7])
    assert rows.flags() == ["--world", "spiral", "--rho", "0.9", "--n-eval", "300", "--seed", "4"]
    for kwargs, message in (({"mixing_seed": 3}, "mixing_seed is not an option it takes"),
                            ({"seed": -1}, "seed"), ({"n": 5}, "n must be")):
        with pytest.raises(IdauditError, match=message) as info:
            EvalRows("spiral", **kwargs)
        assert "\n" not in str(info.value)


DDP_SCRIPT = """
import sys

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger

from idaudit.lightning import IdentifiabilityMonitor


class HalfNoise(torch.utils.data.Dataset):
    # row i: x = z (even i) or noise independent of z (odd i), z ~ N(0, I2)
    def __init__(self, n):
        g = torch.Generator().manual_seed(5)
        self.z = torch.randn(n, 2, generator=g)
        noise = torch.randn(n, 2, generator=g)
        self.x = torch.where((torch.arange(n) % 2 == 0)[:, None], self.z, noise)

    def __len__(self):
        return len(self.z)

    def __getitem__(self, i):
        return {"x": self.x[i], "z": self.z[i]}


class Passthrough(L.LightningModule):
    # h = x, and one parameter so that Lightning has something to train
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))

    def training_step(self, batch, batch_idx):
        return (self.w - 1.0) ** 2

    def validation_step(self, batch, batch_idx):
        return {"embedding": batch["x"] + 0.0 * self.w}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    n, out = int(sys.argv[1]), sys.argv[2]
    val = torch.utils.data.DataLoader(HalfNoise(n), batch_size=64)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=2, strategy="ddp",
                        logger=CSVLogger(out, name="run"),
                        callbacks=[IdentifiabilityMonitor(max_rows=n, floor_draws=0)],
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0,
                        limit_train_batches=1)
    trainer.fit(Passthrough(), val, val)
    if trainer.is_global_zero:
        torch.save({"x": val.dataset.x, "z": val.dataset.z}, out + "/val.pt")
"""


def test_under_ddp_the_audit_sees_every_rank_s_rows(tmp_path):
    """Two CPU processes (DDP, gloo) on a set whose even rows are z and odd rows noise:
    a DistributedSampler deals rank 0 every informative row, so rank 0's share alone gives
    R² = 1; the logged R² is scikit-learn's on the whole set in its own order, about ¼ (z on x
    has slope ½ and explains ½² of z's variance). A script run as DDP runs in practice, Lightning
    starting rank 1 as a second process of the same command (ddp_spawn would pickle the
    trainer, and stable-pretraining, where installed, adds to every Trainer callbacks that
    cannot be pickled)."""
    n = 512
    (tmp_path / "ddp.py").write_text(DDP_SCRIPT)
    proc = subprocess.run([sys.executable, "ddp.py", str(n), str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [csv_file] = (tmp_path / "run").glob("version_*/metrics.csv")
    with open(csv_file) as f:
        row = next(r for r in csv.DictReader(f) if r.get("idaudit/n_samples"))
    val = torch.load(tmp_path / "val.pt", weights_only=True)
    in_sample, heldout = sklearn_r2(val["x"].numpy(), val["z"].numpy())
    assert float(row["idaudit/n_samples"]) == n
    assert float(row["idaudit/r2_h_to_z"]) == pytest.approx(in_sample, abs=1e-6)
    assert float(row["idaudit/r2_h_to_z_heldout"]) == pytest.approx(heldout, abs=1e-6)
    assert 0.15 < in_sample < 0.35  # ≈ ¼; rank 0's half alone gives 1


class SeenZ(L.LightningModule):
    """Trains PairModule's encoder on WorldPairs' dicts and keeps the first training batch's
    latents of every epoch (to see whether the pairs changed)."""

    def __init__(self) -> None:
        super().__init__()
        self.net, self.first = encoder(0), {}

    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.first[self.current_epoch] = batch["z"].clone()
        return pair_step(self.net, batch)["loss"]

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=3e-3)


@pytest.mark.parametrize("how", ["monitor", "sampler"])
def test_world_pairs_are_fresh_each_epoch_without_a_callback_of_ones_own(tmp_path, how):
    """WorldPairs of a world that generates pairs: each epoch trains on fresh pairs, set
    either by the monitor (a plain loader) or by Lightning through data.sampler() (no
    monitor); a dict per row with as_dict."""
    data = idaudit.WorldPairs("spiral", n=512, seed=0, as_dict=True)
    assert set(data[0]) == {"x", "x_prime", "z", "z_prime"}
    module = SeenZ()
    if how == "monitor":
        loader = torch.utils.data.DataLoader(data, batch_size=512)
        callbacks = [IdentifiabilityMonitor(embedding_key="embedding")]
    else:
        loader = torch.utils.data.DataLoader(data, batch_size=512, sampler=data.sampler(False))
        callbacks = []
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False,
                        callbacks=callbacks, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0)
    trainer.fit(module, loader)
    assert data.epoch == 2 and sorted(module.first) == [0, 1, 2]
    firsts = [module.first[e] for e in range(3)]
    assert not torch.equal(firsts[0], firsts[1]) and not torch.equal(firsts[1], firsts[2])
    # epoch e holds exactly world_pairs drawn from epoch e's seed
    from idaudit.worlds.user_pairs import epoch_seed

    again = idaudit.world_pairs("spiral", n=512, seed=epoch_seed(0, 2))
    assert torch.equal(firsts[2], again.z)
