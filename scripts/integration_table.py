"""Other projects' encoder files through ``idaudit audit`` at 224 px: a Markdown table of the
format, the exact command, its exit code, held-out R²(h → z) and its wall time.

Each format is saved as its project saves it, with random-weight stand-ins (transformers ViTs,
hidden 64, 2 layers, 16-px patches, at 224 px): the table measures that each route works
and what it costs, not the quality of an encoder. Every command runs as a subprocess of this
venv's Python (``python -m idaudit …``, the same as the ``idaudit`` script) in a temporary
directory with its own ``$IDAUDIT_CACHE``; the first renders the Reacher evaluation set
(its time is printed apart), the table's times are with that cache warm.

    python scripts/integration_table.py [--out FILE] [--record FILE.json] [--image-size 224]
        [--n-eval 300]

It also writes a JSON record (default docs/data/integration-table.json): the date, the
versions (Python, torch, transformers, timm where it imports), and each row's format,
command, exit code, held-out R² and wall time; tests/test_doc_truths.py checks the table in
docs/integrations.md against it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the stand-in project the tests use too
from standins import ddp, save_ijepa, save_lightning, vit_project  # noqa: E402

HIDDEN = 64

TIMM = "vit_tiny_patch16_224"


def timm_problem() -> str | None:
    """Why ``import timm`` fails in this venv (one line), or None when it works."""
    res = subprocess.run([sys.executable, "-c", "import timm"], capture_output=True, text=True)
    if res.returncode == 0:
        return None
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit {res.returncode}"


def idaudit(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, float, str]:
    """``idaudit ARGS`` as a subprocess: (exit code, wall seconds, last stderr line)."""
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "idaudit", *args], cwd=cwd, env=env,
                         capture_output=True, text=True)
    wall = time.perf_counter() - start
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith(("error", "inconclusive"))]
    return res.returncode, wall, errors[-1] if errors else ""


def make_files(d: Path, size: int, env: dict[str, str], timm_ok: bool) -> dict[str, float]:
    """Every file the rows audit, saved as each project saves it; returns setup timings."""
    import logging

    import numpy as np
    import torch
    import transformers
    from safetensors.torch import save_file

    transformers.utils.logging.disable_progress_bar()  # the setup's noise: bars, tips
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

    (d / "myproject.py").write_text(vit_project(size=size, hidden=HIDDEN, patch=16))
    sys.path.insert(0, str(d))
    try:
        import myproject as mp
    finally:
        sys.path.remove(str(d))
    torch.manual_seed(0)
    # I-JEPA: torch.save of DDP state dicts (train.py's save_checkpoint)
    encoder, target, predictor = mp.make_vit(), mp.make_vit(), torch.nn.Linear(HIDDEN, HIDDEN)
    save_ijepa(d / "jepa-latest.pth.tar", encoder, target, predictor)
    # V-JEPA 2: the encoder wrapped in MultiSeqWrapper (backbone.) and DDP (module.)
    wrap = {f"backbone.{k}": v for k, v in target.state_dict().items()}
    torch.save({"encoder": ddp(wrap), "target_encoder": ddp(wrap), "epoch": 3},
               str(d / "vjepa2.pt"))
    # Hugging Face: save_pretrained
    mp.vit_model(pooling=True).save_pretrained(str(d / "vit-hf"))

    # Lightning (LeJEPA / stable-pretraining): a 1-step fit, then save_checkpoint
    save_lightning(d / "last.ckpt", mp.make_vit(), mp.make_projector(),
                   torch.rand(4, 3, size, size), batch_size=2, lr=0.01)
    # torch.compile: the compiled wrapper's state_dict (_orig_mod. keys)
    torch.save(torch.compile(mp.make_vit()).state_dict(), str(d / "compiled.pt"))
    # LeWM / stable-worldmodel: weights.pt + config.json (Hydra _target_s)
    lewm = mp.make_lewm()
    (d / "lewm").mkdir()
    torch.save(lewm.state_dict(), str(d / "lewm" / "weights.pt"))
    (d / "lewm" / "config.json").write_text(json.dumps({
        "_target_": "myproject.JEPA", "encoder": {"_target_": "myproject.ClsViT"},
        "projector": {"_target_": "torch.nn.Linear", "in_features": HIDDEN, "out_features": 16},
        "predictor": {"_target_": "torch.nn.Linear", "in_features": 16, "out_features": 16}}))
    if timm_ok:
        import timm

        net = timm.create_model(TIMM, pretrained=False, num_classes=0, img_size=size)
        save_file(net.state_dict(), str(d / "timm.safetensors"))
    sys.modules.pop("myproject", None)
    # an idaudit checkpoint (a synthetic world: Reacher training needs a rendered dataset),
    # and the paper's run.pt made from its embeddings
    timings = {}
    start = time.perf_counter()
    code, _, err = idaudit(["train", "--world", "spiral", "--steps", "500", "--quiet", "--out",
                            "spiral.safetensors"], d, env)
    timings["train"] = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"idaudit train failed ({code}): {err}")
    code, _, err = idaudit(["embed", "spiral.safetensors", "--out", "spiral.npz"], d, env)
    if code != 0:
        raise SystemExit(f"idaudit embed failed ({code}): {err}")
    with np.load(d / "spiral.npz") as f:
        run_pt = {"z": f["z"], "x": f["x"], "h": f["h"]}
    from idaudit.models.checkpoint import load_checkpoint

    run_pt["model_state_dict"] = load_checkpoint(d / "spiral.safetensors").encoder.state_dict()
    torch.save(run_pt, str(d / "run.pt"))
    return timings


def rows(size: int, n_eval: int, timm_reason: str | None) -> list[tuple[str, list[str] | str]]:
    """(format, the idaudit arguments, or why the row is skipped)."""
    reacher = ["--world", "reacher", "--image-size", str(size), "--n-eval", str(n_eval),
               "--normalize", "imagenet"]
    vit = ["--arch", "myproject:make_vit", "--pool", "mean"]
    timm_row: list[str] | str = f"skipped: timm cannot be imported ({timm_reason})" \
        if timm_reason else ["audit", "timm.safetensors", "--arch", f"timm:{TIMM}",
                             "--arch-kwargs", json.dumps({"num_classes": 0, "img_size": size}),
                             *reacher]
    return [
        ("I-JEPA `.pth.tar`", ["audit", "jepa-latest.pth.tar", "--key", "target_encoder", *vit,
                               *reacher]),
        ("V-JEPA 2 (`backbone.` prefix)", ["audit", "vjepa2.pt", "--key", "target_encoder",
                                           "--prefix", "backbone.", *vit, *reacher]),
        ("Hugging Face directory", ["audit", "vit-hf", "--pool", "cls", *reacher]),
        ("Lightning `.ckpt`", ["audit", "last.ckpt", "--key", "state_dict", "--prefix",
                               "model.backbone.", *vit, *reacher]),
        ("`torch.compile` (`_orig_mod.`)", ["audit", "compiled.pt", *vit, *reacher]),
        ("LeWM directory, `--embed`", ["audit", "lewm", "--embed", "myproject:encode_fn",
                                       *reacher]),
        ("`idaudit embed` → `.npz`", ["embed", "vit-hf", "--pool", "cls", *reacher,
                                      "--out", "e.npz"]),
        ("the `.npz` of `idaudit embed`", ["audit", "e.npz"]),
        ("the paper's `run.pt` (arrays)", ["audit", "run.pt"]),
        ("idaudit checkpoint (spiral world, `idaudit train --world spiral --steps 500`)",
         ["audit", "spiral.safetensors"]),
        (f"timm (`timm:{TIMM}`)", timm_row),
    ]


def r2_value(report: Path) -> float | None:
    if not report.is_file():
        return None
    return json.loads(report.read_text())["metrics"].get("r2_h_to_z_heldout")


def r2_of(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def versions(timm_ok: bool) -> dict[str, str]:
    """The versions the table was measured with."""
    import torch
    import transformers

    got = {"python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__}
    if timm_ok:
        import timm

        got["timm"] = timm.__version__
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument("--record", type=Path, default=ROOT / "docs" / "data"
                        / "integration-table.json", help="the JSON record of the table")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--n-eval", type=int, default=300)
    args = parser.parse_args()
    reason = timm_problem()
    with tempfile.TemporaryDirectory(prefix="idaudit-integrations-") as tmp:
        d = Path(tmp)
        env = {**os.environ, "IDAUDIT_CACHE": str(d / "cache")}
        start = time.perf_counter()
        timings = make_files(d, args.image_size, env, reason is None)
        setup = time.perf_counter() - start
        table = rows(args.image_size, args.n_eval, reason)
        first = table[0][1]
        assert isinstance(first, list)
        code, cold, err = idaudit(first, d, env)  # renders the evaluation set into the cache
        record: list[dict[str, object]] = []
        lines = ["| format | command | exit | R²(h → z) held-out | wall (s) |",
                 "|---|---|---|---|---|"]
        for name, argv in table:
            if isinstance(argv, str):
                lines.append(f"| {name} | — | — | — | {argv} |")
                record.append({"format": name, "skipped": argv})
                continue
            report = d / f"report-{len(lines)}.json"
            extra = ["--json", report.name] if argv[0] == "audit" else []
            code_i, wall, err_i = idaudit([*argv, *extra], d, env)
            shown = " ".join(a if " " not in a and "{" not in a else f"'{a}'" for a in argv)
            note = f" ({err_i})" if err_i else ""
            r2 = r2_value(report)
            lines.append(f"| {name} | `idaudit {shown}` | {code_i}{note} | {r2_of(r2)} | "
                         f"{wall:.1f} |")
            record.append({"format": name, "command": f"idaudit {shown}", "exit": code_i,
                           "r2_h_to_z_heldout": r2, "wall_s": round(wall, 1)})
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    caption = (f"Reacher evaluation set: {args.n_eval} OU pairs at {args.image_size} px "
               f"(ρ = 0.95); stand-ins with random weights (HF ViT, hidden 64, 2 layers, "
               f"16-px patches). The first command with a cold cache (rendering the set): "
               f"{cold:.1f} s (exit {code}{', ' + err if err else ''}); the table's times are "
               f"with the cache warm, each a fresh process (imports included). Setup (saving "
               f"every file, `idaudit train --world spiral --steps 500` in "
               f"{timings['train']:.1f} s for the idaudit checkpoint and run.pt): {setup:.1f} s. "
               f"{os.cpu_count()} CPUs, load average {load}.")
    text = "\n".join(lines) + "\n\n" + caption + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    args.record.write_text(json.dumps({
        "date": datetime.date.today().isoformat(), "versions": versions(reason is None),
        "image_size": args.image_size, "n_eval": args.n_eval, "rows": record,
        "caption": caption}, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
