"""What the untrusted-file checks cost (issue 27): ``trust.check_torch_file`` (the zip directory
and a dry run of the pickle) against ``torch.load(weights_only=True)`` of the same file, in the
same process, median of ``--rounds`` alternating rounds; and the Hugging Face meta-device sizing
against building the same network.

    python benchmarks/bench_untrusted_checks.py [--rounds 5]

Files: a ViT-B-shaped state dict (86 M float32 parameters, ≈ 344 MB) and a Lightning-shaped
checkpoint of a small network with AdamW state (many small tensors, a larger pickle).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from idaudit.loading.trust import check_torch_file


def vit_b_state(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    state = {"patch_embed.proj.weight": torch.randn(768, 3, 16, 16, generator=g),
             "pos_embed": torch.randn(1, 197, 768, generator=g)}
    for i in range(12):
        p = f"blocks.{i}."
        state |= {p + "attn.qkv.weight": torch.randn(2304, 768, generator=g),
                  p + "attn.qkv.bias": torch.randn(2304, generator=g),
                  p + "attn.proj.weight": torch.randn(768, 768, generator=g),
                  p + "mlp.fc1.weight": torch.randn(3072, 768, generator=g),
                  p + "mlp.fc2.weight": torch.randn(768, 3072, generator=g),
                  p + "norm1.weight": torch.ones(768), p + "norm2.weight": torch.ones(768)}
    return state


def lightning_like() -> dict:
    net = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(200)])
    opt = torch.optim.AdamW(net.parameters())
    net(torch.randn(8, 64)).sum().backward()
    opt.step()
    return {"state_dict": net.state_dict(), "optimizer_states": [opt.state_dict()],
            "hyper_parameters": {f"h{i}": i for i in range(1000)}, "epoch": 3}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, obj in (("ViT-B state dict", vit_b_state()), ("Lightning-like", lightning_like())):
            path = Path(tmp) / "f.pt"
            torch.save(obj, str(path))
            checks, loads = [], []
            for _ in range(args.rounds):
                checks.append(timed(lambda: check_torch_file(path, trusted=False)))  # noqa: B023
                loads.append(timed(lambda: torch.load(str(path), weights_only=True)))  # noqa: B023
            c, ld = statistics.median(checks), statistics.median(loads)
            print(f"{name} ({path.stat().st_size / 2**20:.0f} MiB): check {c * 1e3:.1f} ms, "
                  f"load {ld * 1e3:.1f} ms, check/load {c / ld:.3f} (medians of {args.rounds})")
    transformers = __import__("transformers")
    config = transformers.ViTConfig()  # ViT-B/16
    sizes, builds = [], []
    for _ in range(args.rounds):
        def sized():
            with torch.device("meta"):
                transformers.ViTModel(config)
        sizes.append(timed(sized))
        builds.append(timed(lambda: transformers.ViTModel(config)))
    s, b = statistics.median(sizes), statistics.median(builds)
    print(f"Hugging Face ViT-B: meta sizing {s * 1e3:.0f} ms, build {b * 1e3:.0f} ms, "
          f"sizing/build {s / b:.3f} (medians of {args.rounds})")


if __name__ == "__main__":
    main()
