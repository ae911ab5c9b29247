"""One resolver for a run's options: sources, --show-config, device-free run ids, the note."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from idaudit.cli import app
from idaudit.training.config import DEFAULTS
from idaudit.training.runs import resolve

runner = CliRunner()


def _config(output: str) -> dict[str, tuple[str, str]]:
    rows = {}
    for line in output.splitlines():
        key, _, rest = line.partition(" = ")
        value, _, source = rest.rpartition("  (")
        rows[key.strip()] = (value, source.removesuffix(")"))
    return rows


def test_each_value_records_where_it_came_from():
    r = resolve({"world": "reacher", "rho": 0.95, "epochs": 3}, device="cpu")
    s = r.sources
    assert s["epochs"] == (3, "given") and s["rho"] == (0.95, "given")
    assert s["pairs"] == (60_000, "recipe cpu") and s["encoder_kwargs"] == ({"width": 16},
                                                                            "recipe cpu")
    assert s["lamb"] == (5e-3, "world reacher") and s["batch"] == (256, "default")
    assert s["recipe"] == ("cpu", "device cpu")
    spiral = resolve({"world": "spiral"}).sources
    assert spiral["steps"] == (DEFAULTS["steps"], "default")
    assert spiral["lamb"] == (DEFAULTS["lamb"], "default")


def test_show_config_reacher_prints_sources_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["train", "--world", "reacher", "--rho", "0.95", "--show-config",
                              "--device", "cpu"])
    assert res.exit_code == 0, res.output
    rows = _config(res.output)
    assert rows["epochs"] == ("20", "recipe cpu")
    assert rows["image_size"] == ("32", "recipe cpu")
    assert rows["pairs"] == ("60000", "recipe cpu")
    assert rows["rho"] == ("0.95", "given")
    assert rows["lamb"] == ("0.005", "world reacher")
    assert rows["batch"] == ("256", "default")
    assert rows["recipe"] == ("cpu", "device cpu")
    assert "steps" not in rows  # reacher counts epochs
    assert list(tmp_path.iterdir()) == []  # nothing rendered, trained or written


def test_show_config_spiral_and_an_existing_out_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "keep.safetensors"
    out.write_text("old")
    res = runner.invoke(app, ["train", "--world", "spiral", "--show-config", "--lr", "0.01",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = _config(res.output)
    assert rows["world"] == ("spiral", "given")
    assert rows["steps"] == ("20000", "default")
    assert rows["lr"] == ("0.01", "given")
    assert rows["views"] == ("anchor", "default")
    assert rows["dim"] == ("2", "world spiral")
    assert "recipe" not in rows
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [out.name]


def test_run_id_does_not_depend_on_the_machine(monkeypatch):
    import torch

    from idaudit.experiments.sweep import run_id

    runs = [{"world": "reacher", "rho": 0.9, "lamb": 5e-3}, {"world": "spiral", "steps": 50},
            {"world": "reacher", "rho": 0.9, "recipe": "paper"}]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    without = [run_id(r) for r in runs]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert [run_id(r) for r in runs] == without
    # nor on the device a worker passes in: the recipe it picks runs, the id stays
    cpu, gpu = resolve(runs[0], device="cpu"), resolve(runs[0], device="cuda:0")
    assert (cpu.recipe, gpu.recipe) == ("cpu", "paper") and cpu.id == gpu.id == without[0]
    assert gpu.train.epochs == 100 and cpu.train.epochs == 20


def test_recipe_note_says_what_will_run():
    mine = resolve({"world": "reacher", "rho": 0.95, "pairs": 500, "epochs": 1}, device="cpu")
    assert mine.recipe_note.startswith("recipe cpu")
    runs = mine.recipe_note.split(" — ")[0]  # what runs; after the dash, why the recipe
    assert runs == "recipe cpu: 32×32 images, pixel_cnn (width 16), 500 pairs × 1 epochs"
    big = resolve({"world": "reacher", "image_size": 48, "encoder": "pixel_cnn",
                   "encoder_kwargs": {"width": 8}}, device="cuda")
    tail = big.recipe_note.split(" — ")[0]
    assert big.recipe == "paper" and "48×48 images" in tail and "width 8" in tail
    assert "100 000 pairs × 100 epochs" in tail


def test_recipe_note_describes_existing_data(tmp_path):
    from idaudit.worlds.reacher import data as rd

    root = tmp_path / "d"
    rd.build_dataset(root, rd.ReacherSpec(pairs=12, n_eval=12, image_size=32), workers=1)
    r = resolve({"world": "reacher", "data": str(root)}, device="cpu")
    tail = r.recipe_note.split(" — ")[0]
    assert "32×32 images" in tail and "12 pairs × 20 epochs" in tail
    assert r.sources["pairs"] == (12, "world reacher")


@pytest.mark.parametrize("flag", ["--epochs", "--steps", "--lamb", "--pairs", "--eval-every"])
def test_train_help_leaves_defaults_to_the_resolver(flag):
    import typer.main

    params = {p.opts[0]: p for p in typer.main.get_command(app).commands["train"].params
              if getattr(p, "opts", None)}
    assert "default" not in (params[flag].help or "")
