"""Bad input and faults: the exit code (and whether a traceback was printed) of each case, for
this checkout and, with ``--base-src``, for another checkout's ``src/`` — a Markdown table.

    python scripts/exit_code_table.py [--base-src /path/to/old/src]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch


def setup(d: Path) -> dict[str, str]:
    rng = np.random.default_rng(0)
    z = rng.standard_normal((600, 2))
    np.savez(d / "ok.npz", z=z, h=z + 0.01 * rng.standard_normal(z.shape))
    np.savez(d / "zero_cols.npz", z=np.zeros((600, 0)), h=z)
    np.save(d / "arr.npy", z)
    (d / "renamed.npz").write_bytes((d / "arr.npy").read_bytes())
    (d / "UPPER.NPZ").write_bytes((d / "ok.npz").read_bytes())
    (d / "noext").write_bytes((d / "ok.npz").read_bytes())
    (d / "afile").write_text("x")
    (d / "adir").mkdir()

    class Empty(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
            return []

    class Cplx(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.complex(x, x)

    torch.jit.script(Empty()).save(str(d / "empty.pt"))
    torch.jit.script(Cplx()).save(str(d / "complex.pt"))
    (d / "exits.py").write_text("import sys\nsys.exit(0)\n")
    # issues 17 and 18: hostile array files, gates and paths
    np.savez(d / "circ_nan.npz", z=z, h=z, circular=np.array([np.nan]))
    np.savez(d / "circ_dup.npz", z=z, h=z, circular=np.array([1, 1]))
    np.savez(d / "x_rows.npz", z=z, h=z, x=z[:10])
    np.savez(d / "const_z.npz", z=np.ones_like(z), h=z)
    np.save(d / "h3d.npy", np.zeros((600, 2, 2)))
    np.save(d / "h2d.npy", z)
    import io
    import zipfile

    header = io.BytesIO()  # an .npz whose h claims 8 TiB: a few bytes that would inflate
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": (2**40, 1)})
    with zipfile.ZipFile(d / "bomb.npz", "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("h.npy", header.getvalue() + bytes(1 << 16))
    (d / "string_gate.toml").write_text('[min]\nr2_h_to_z_heldout = "0.9"\n')
    (d / "copy.npz").write_bytes((d / "ok.npz").read_bytes())
    (d / "deep.json").write_text('{"a": ' + "[" * 100_000 + "}")
    return {"d": str(d)}


CASES = [
    ("--json in an unwritable place", "audit {d}/ok.npz --json /proc/report.json"),
    ("--json onto a directory", "audit {d}/ok.npz --json {d}/adir"),
    ("--json under a path whose parent is a file", "audit {d}/ok.npz --json {d}/afile/r.json"),
    ("--json empty string", "audit {d}/ok.npz --json ''"),
    ("train --out unwritable (checked before training)",
     "train --world spiral --steps 50 --out /proc/s.safetensors"),
    ("--gate a directory", "audit {d}/ok.npz --gate {d}/adir"),
    ("--gate /dev/zero", "audit {d}/ok.npz --gate /dev/zero"),
    ("z with zero columns", "audit {d}/zero_cols.npz"),
    (".npy renamed to .npz", "audit {d}/renamed.npz"),
    ("upper-case extension .NPZ (arrays)", "audit {d}/UPPER.NPZ"),
    ("no extension (arrays)", "audit {d}/noext"),
    ("TorchScript returning an empty list", "audit {d}/empty.pt --world spiral --n-eval 500"),
    ("TorchScript returning complex values", "audit {d}/complex.pt --world spiral --n-eval 500"),
    ("--test-fraction 0.999", "audit {d}/ok.npz --test-fraction 0.999"),
    ("seed beyond 64 bits", "train --world spiral --steps 50 --seed 100000000000000000000000"),
    ("--dim too large to allocate", "world coupling --dim 2000000 --pairs 10 --out {d}/w.st"),
    ("--encoder cnn on a vector world", "train --world spiral --steps 50 --encoder cnn"),
    ("--encoder-kwargs without --encoder",
     "train --world spiral --steps 50 --encoder-kwargs '{{\"width\": 8}}'"),
    ("divergence (--lr 1000)", "train --world spiral --steps 300 --lr 1000"),
    ("--arch factory module that calls sys.exit(0)",
     "audit {d}/ok.npz.safetensors --arch exits:make --world spiral"),
    ("sweep --steps 0", "sweep 2d --steps 0 --list"),
    ("sweep --seeds 0", "sweep 2d --seeds 0 --list"),
    # issue 17
    ("circular index NaN in the arrays", "audit {d}/circ_nan.npz"),
    ("circular index given twice", "audit {d}/circ_dup.npz"),
    (".npz member inflating to 8 TiB", "audit {d}/bomb.npz"),
    ("gate value a string (\"0.9\")", "audit {d}/ok.npz --gate {d}/string_gate.toml"),
    # issue 18
    ("--json onto the audited file", "audit {d}/copy.npz --json {d}/copy.npz"),
    ("train --out onto its --data", "world spiral --pairs 300 --out {d}/w.safetensors && "
     "{python} -m idaudit.cli train --data {d}/w.safetensors --epochs 1 --n-eval 100 "
     "--out {d}/w.safetensors"),
    ("x with the wrong row count", "audit {d}/x_rows.npz"),
    ("constant true latents z", "audit {d}/const_z.npz --min-r2 0.5"),
    ("consistency on 3-D h", "consistency {d}/h3d.npy {d}/h2d.npy"),
    ("sweep --set batch=2.5", "sweep 2d --steps 5 --set batch=2.5 --out {d}/sw"),
    ("sweep --set device=5", "sweep 2d --steps 5 --set device=5 --list"),
    ("--arch-kwargs nested 100 000 deep",
     "audit {d}/ok.npz.safetensors --arch exits:make --world spiral --arch-kwargs "
     "\"$(cat {d}/deep.json)\""),
    ("--n-eval 10^11", "train --world spiral --steps 5 --n-eval 100000000000"),
]


def run(cmd: str, src: str | None, cwd: str) -> tuple[int, bool]:
    env = {**os.environ, "PYTHONPATH": src} if src else dict(os.environ)
    res = subprocess.run(f"{sys.executable} -m idaudit.cli {cmd}", shell=True, cwd=cwd,
                         capture_output=True, text=True, env=env, timeout=600)
    return res.returncode, "Traceback" in res.stdout + res.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-src", default=None, help="another checkout's src/ (before)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        fmt = setup(d)
        # plain weights for the --arch case: safetensors of a linear layer
        from safetensors.torch import save_file

        save_file(torch.nn.Linear(2, 2).state_dict(), str(d / "ok.npz.safetensors"))
        head = "| case | before: exit (traceback) | after: exit (traceback) |" if \
            args.base_src else "| case | exit (traceback) |"
        print(head)
        print("|---|---|---|" if args.base_src else "|---|---|")
        for name, cmd in CASES:
            c = cmd.format(python=sys.executable, **fmt)
            after = run(c, None, tmp)
            cell = f"{after[0]}{' (traceback)' if after[1] else ''}"
            if args.base_src:
                before = run(c, args.base_src, tmp)
                print(f"| {name} | {before[0]}{' (traceback)' if before[1] else ''} | {cell} |")
            else:
                print(f"| {name} | {cell} |")


if __name__ == "__main__":
    main()
