#!/usr/bin/env bash
# All GPU checks of the open issues in one run (for a session that is lent a CUDA device).
# Usage: bash scripts/gpu_checks.sh OUTDIR   — writes logs and JSON there; prints steps/s.
set -uo pipefail
out=${1:-gpu-out}
mkdir -p "$out"
python3 -m venv .venv-gpu && . .venv-gpu/bin/activate
pip install -q torch && pip install -q -e ".[dev,reacher]"
python -c "import torch; print('cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0))"
# issue 2: spiral and coupling --dim 1024 on CUDA (steps/s in the logs)
idaudit train --world spiral --rho 0.95 --lamb 1e-3 --steps 20000 --seed 1337 --device cuda \
  --out "$out/spiral.safetensors" -q | tail -3
idaudit train --world coupling --dim 1024 --lamb 1e-6 --steps 20000 --seed 0 --device cuda \
  --out "$out/c1024.safetensors" -q | tail -3
idaudit audit "$out/c1024.safetensors" --json "$out/c1024.audit.json" | tail -5
# issue 4: the paper's Reacher scale (100 000 OU pairs, rho 0.95, lambda 5e-3, 100 epochs)
MUJOCO_GL=egl idaudit train --world reacher --rho 0.95 --recipe paper \
  --device cuda --data "$out/reacher-ou" --out "$out/reacher.safetensors" -q | tail -25
idaudit plan "$out/reacher.safetensors" --pairs 100 --json "$out/reacher.plan.json" \
  --plot "$out/reacher.png" | tail -8
python - "$out" <<'PY'
import json, sys
d = sys.argv[1]
for name in ("spiral", "c1024"):
    log = json.load(open(f"{d}/{name}.log.json"))
    print(name, "steps/s", round(log["steps_per_second"], 1), "R2", log["metrics"]["r2_h_to_z"])
PY
