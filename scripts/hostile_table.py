"""Issue 27's hostile inputs, one Markdown row each: exit code, the output's first error line
(ANSI escapes shown as ``\\x1b[``), whether the case's marker file exists afterwards, whether
every input's and victim's sha256 is unchanged, the child's peak RSS and its wall time.

Every input is built here in a temporary directory (nothing is downloaded; the Reacher cache
case, 6, only with ``--with-reacher``). Each case runs ``PYTHON -m idaudit …`` in a fresh
process with ``--src`` first on PYTHONPATH, under an address-space cap (``--cap-gib``: the
bombs' peak RSS cannot pass it) and a timeout; peak RSS is the child's own (``os.wait4``, its
descendants included). Run it once per tree and compare::

    mkdir -p /tmp/before && git archive f9e7eff src | tar -x -C /tmp/before
    python scripts/hostile_table.py --src /tmp/before/src > before.md   # before issue 27
    python scripts/hostile_table.py > after.md                           # this checkout
    python scripts/hostile_table.py --with-reacher --json rows.json --only 5a --only lewm
    python scripts/hostile_table.py --python /path/to/venv-with-timm/bin/python

The script itself needs torch, numpy and safetensors (to build the inputs); ``--python`` may
be another interpreter (one with timm, say) that runs the CLI.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import os
import pickle
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

SRC = Path(__file__).resolve().parents[1] / "src"
COUPLING = ["--world", "coupling", "--dim", "4"]
ERROR_LINE = re.compile(r"^\W*(error|inconclusive|gate failed)\b(?!\W*$)|no such option|invalid value|"
                        r"missing (argument|option)|traceback|memoryerror|killed", re.I)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class Case:
    name: str
    args: list[str]  # idaudit's arguments
    watch: list[Path] = field(default_factory=list)  # inputs and victims: sha256 unchanged?
    marker: Path | None = None  # a file that must not exist afterwards
    env: dict[str, str | None] = field(default_factory=dict)  # None: unset
    tty: bool = False  # run under `script`, so that stdout and stderr are a terminal
    cwd: Path | None = None
    pick: re.Pattern = ERROR_LINE  # which output line the table shows
    prepare: Callable[[], None] | None = None  # run just before the case


# ---- inputs ------------------------------------------------------------------------------


def deflated(head: bytes, zeros: int, tail: bytes = b"", unit: int = 1 << 24):
    """(raw DEFLATE of head + zeros × NUL + tail, CRC-32, size): one compressed block of zeros
    repeated — each ends in a full flush, so no block refers to another."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts = [c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)]
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    k, rest = divmod(zeros, unit)
    block = bytes(unit)
    parts.append((c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)) * k)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts.append(c.compress(bytes(rest) + tail) + c.flush())
    crc = zlib.crc32(head)
    for _ in range(k):
        crc = zlib.crc32(block, crc)
    return b"".join(parts), zlib.crc32(bytes(rest) + tail, crc), len(head) + zeros + len(tail)


def torch_zip(path: Path, members: dict[str, tuple[bytes, int, int]]) -> Path:
    """A torch.save zip (archive/data.pkl, byteorder, version, data/…) whose ``members`` are
    written already deflated (zip64 headers: they may inflate beyond 4 GiB)."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, crc, size) in members.items():
            zi = zipfile.ZipInfo("archive/" + name, date_time=(2020, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.file_size, zi.compress_size, zi.CRC = size, len(data), crc
            zi.header_offset = zf.fp.tell()
            zf.fp.write(zi.FileHeader(zip64=True))
            zf.fp.write(data)
            zf.filelist.append(zi)
            zf.NameToInfo[zi.filename] = zi
            zf.start_dir = zf.fp.tell()
        zf.writestr("archive/byteorder", "little")
        zf.writestr("archive/version", "3\n")
    return path


class _Storage:
    """Stands for storage archive/data/0 (pickled as a persistent id)."""


class _Tensor:
    def __init__(self, n: int):
        self.n = n

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2,
                (_Storage(), 0, (self.n,), (1,), False, collections.OrderedDict()))


def storage_pickle(n: int) -> bytes:
    """data.pkl of ``{"weight": uint8 tensor of n elements}`` in storage archive/data/0."""
    class P(pickle.Pickler):
        def persistent_id(self, obj):
            return ("storage", torch.ByteStorage, "0", "cpu", n) if isinstance(obj, _Storage) \
                else None
    buf = io.BytesIO()
    P(buf, protocol=2).dump({"weight": _Tensor(n)})
    return buf.getvalue()


def string_bomb(n: int) -> tuple[bytes, int, bytes]:
    """data.pkl of ``{"h": n NULs}`` (one BINUNICODE string, n < 4 GiB): head, zeros, tail."""
    return b"\x80\x02}(X\x01\x00\x00\x00hX" + n.to_bytes(4, "little"), n, b"u."


class _Opens:
    """Unpickled, opens (creates) ``path`` for writing."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


class _FromFile(torch.nn.Module):
    """forward maps two files shared and writes into them (the second is created)."""

    def __init__(self, victim: str, marker: str):
        super().__init__()
        self.victim = victim
        self.marker = marker

    def forward(self, x):
        a = torch.from_file(self.victim, shared=True, size=4, dtype=torch.uint8)
        b = torch.from_file(self.marker, shared=True, size=4, dtype=torch.uint8)
        a.fill_(65)
        b.fill_(65)
        return x + a[:1].float() * 0 + b[:1].float() * 0


class _Pool(torch.nn.Module):
    """An image encoder for any size: 4 × 4 average pooling, flattened (48 features)."""

    def forward(self, x):
        return torch.nn.functional.adaptive_avg_pool2d(x, 4).flatten(1)


def victim(path: Path, text: str = "precious\n") -> Path:
    path.write_text(text)
    return path


def lewm_dir(folder: Path, payload: str) -> Path:
    """weights.pt + config.json: a torch.nn.Linear(4, 4) whose ``bias`` value is ``payload``."""
    folder.mkdir()
    torch.save(torch.nn.Linear(4, 4).state_dict(), folder / "weights.pt")
    config = {"_target_": "torch.nn.Linear", "in_features": 4, "out_features": 4, "bias": payload}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def bert_dir(folder: Path, **config) -> Path:
    folder.mkdir()
    config = {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 16,
              "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
              "intermediate_size": 16, "max_position_embeddings": 16, **config}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def bert_weights(config: Path, out: Path) -> None:
    """A whole BertModel's state dict for ``config``, written to ``out``."""
    import transformers

    config = transformers.BertConfig(**json.loads(config.read_text()))
    save_file(transformers.BertModel(config).state_dict(), str(out))


# ---- cases -------------------------------------------------------------------------------


def lewm_cases(d: Path) -> list[Case]:
    v, marker, payload = victim(d / "victim.txt"), d / "unpickled.marker", d / "payload.pt"
    torch.save(_Opens(str(marker)), payload)
    opens = lewm_dir(d / "lewm_open", "${oc.create:{_target_: builtins.open, file: " + str(v)
                     + ", mode: w}}")
    loads = lewm_dir(d / "lewm_load", "${oc.create:{_target_: torch.load, f: " + str(payload)
                     + ", weights_only: false}}")
    return [Case("1 LeWM config: oc.create builtins.open (mode w)",
                 ["audit", str(opens), *COUPLING, "--n-eval", "2000"], [v, opens / "config.json"]),
            Case("1 LeWM config: oc.create torch.load(weights_only=False)",
                 ["audit", str(loads), *COUPLING, "--n-eval", "2000"], [payload], marker)]


def torchscript_cases(d: Path) -> list[Case]:
    v, marker, enc = victim(d / "ts_victim.txt"), d / "ts_created.bin", d / "fromfile.pt"
    torch.jit.script(_FromFile(str(v), str(marker))).save(str(enc))
    return [Case("2 TorchScript forward: torch.from_file(shared=True).fill_",
                 ["audit", str(enc), *COUPLING, "--n-eval", "2000"], [v, enc], marker)]


def embed_cases(d: Path, ck: Path) -> list[Case]:
    rows = []
    for name in ("notes.txt", "meta.json", "-"):
        where = d / f"embed_{len(rows)}"
        where.mkdir()
        rows.append(Case(f"3 embed --out {name} (an existing file)",
                         ["embed", str(ck), "--out", name], [victim(where / name), ck], cwd=where))
    return rows


def timm_cases(d: Path) -> list[Case]:
    w = d / "w.safetensors"
    save_file(torch.nn.Linear(4, 4).state_dict(), str(w))
    local = d / "timm_local"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({"architecture": "resnet18", "num_classes": 4}))
    return [Case("4 --arch timm:hf-hub: (HF_HUB_OFFLINE unset)",
                 ["audit", str(w), "--arch", "timm:hf-hub:someorg/somemodel", *COUPLING], [w],
                 env={"HF_HUB_OFFLINE": None}),
            Case("4 --arch timm:local-dir:",
                 ["audit", str(w), "--arch", f"timm:local-dir:{local}", *COUPLING], [w],
                 env={"HF_HUB_OFFLINE": None})]


def bomb_cases(d: Path) -> list[Case]:
    pkl = torch_zip(d / "pkl_bomb.pt", {"data.pkl": deflated(*string_bomb(3 << 30))})
    n = 10_000_000_000
    storage = torch_zip(d / "storage_bomb.pt", {"data.pkl": deflated(storage_pickle(n), 0),
                                                "data/0": deflated(b"", n)})
    # ~2.0e10 float32 parameters (~80 GB) if built; model.safetensors holds no weight of it
    hf = bert_dir(d / "hf_huge", hidden_size=16384, intermediate_size=65536,
                  num_hidden_layers=6, num_attention_heads=64, vocab_size=30522,
                  max_position_embeddings=512)
    save_file({"unrelated": torch.zeros(1)}, str(hf / "model.safetensors"))
    mb = lambda p: f"{p.stat().st_size / 1e6:.1f} MB"  # noqa: E731
    arch = ["--arch", "torch.nn:Identity", *COUPLING]
    return [Case(f"5a torch.save zip: data.pkl {mb(pkl)} → 3 GiB", ["audit", str(pkl), *arch],
                 [pkl]),
            Case(f"5b torch.save zip: data/0 {mb(storage)} → 10 GB",
                 ["audit", str(storage), *arch], [storage]),
            Case("5c HF dir: BertModel config of ~80 GB, no weights", ["audit", str(hf), *COUPLING],
                 [hf / "config.json", hf / "model.safetensors"])]


def tamper(cache: Path) -> None:
    """Zero the first chunk's images and write its new sha256 into meta.json."""
    meta_path = next(cache.glob("reacher-eval/*/meta.json"))
    meta = json.loads(meta_path.read_text())
    chunk = meta["chunks"][0]
    path = meta_path.parent / chunk["name"]
    with np.load(path) as f:
        arrays = dict(f)
    arrays["x"] = np.zeros_like(arrays["x"])
    np.savez_compressed(path, **arrays)
    chunk["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    meta_path.write_text(json.dumps(meta))


def reacher_cases(d: Path, enc: Path) -> list[Case]:
    cache = d / "cache6"
    args = ["audit", str(enc), "--world", "reacher", "--image-size", "32", "--n-eval", "200",
            "--cache-dir", str(cache)]
    note = re.compile(r"^note:|" + ERROR_LINE.pattern, re.I)
    return [Case("6 Reacher cache: first audit (renders it)", args, [enc], pick=note),
            Case("6 Reacher cache: chunk images zeroed, meta.json sha256 rewritten", args, [enc],
                 pick=note, prepare=lambda: tamper(cache))]


def small_cases(d: Path, ck: Path, enc: Path) -> list[Case]:
    j = d / "json_dash"
    j.mkdir()
    reacher = ["--world", "reacher", "--n-eval", "200"]
    inside = bert_dir(d / "hf_index")
    bert_weights(inside / "config.json", d / "outside.safetensors")
    (inside / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"embeddings.word_embeddings.weight":
                                        "../outside.safetensors"}}))
    e = d / "e.npz"
    return [Case("7 audit --json - (a file named '-'?)", ["audit", str(ck), "--json", "-"], [ck],
                 j / "-", cwd=j),
            Case("7 --normalize 0.5,1e-310 (denormal std)",
                 ["audit", str(enc), *reacher, "--image-size", "32", "--normalize", "0.5,1e-310",
                  "--cache-dir", str(d / "cache7")], [enc]),
            Case("7 --image-size 300 on reacher", ["audit", str(enc), *reacher, "--image-size",
                                                   "300", "--cache-dir", str(d / "cache7")], [enc]),
            Case("7 embed --cache-dir equal to --out (marker: a cache rendered there)",
                 ["embed", str(enc), *reacher, "--image-size", "32", "--cache-dir", str(e), "--out",
                  str(e)], [enc], e / "reacher-eval"),
            Case("7 HF weight_map naming ../outside.safetensors",
                 ["audit", str(inside), *COUPLING], [d / "outside.safetensors"])]


def ansi_cases(d: Path) -> list[Case]:
    """An error line and a usage error, written to a pipe, forced to colour, and to a pty."""
    ways = {"pipe": ({"FORCE_COLOR": None}, False), "pty": ({"TERM": "xterm-256color"}, True),
            "FORCE_COLOR=1": ({"FORCE_COLOR": "1", "TERM": "xterm-256color"}, False)}
    return [Case(f"7 ANSI: {what}, {way}", ["audit", str(d / "missing.pt"), *extra], env=env,
                 tty=tty)
            for what, extra in (("error line", []), ("unknown option", ["--bogus"]))
            for way, (env, tty) in ways.items()]


# ---- running -----------------------------------------------------------------------------


def sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def run_case(case: Case, python: str, src: str, d: Path, timeout: float, cap: int) -> dict:
    if case.prepare:
        case.prepare()
    before = {p: sha(p) for p in case.watch}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get(
        "PYTHONPATH")]))}
    for k, v in case.env.items():
        env.pop(k, None) if v is None else env.__setitem__(k, v)
    argv = [python, "-m", "idaudit", *case.args]
    if case.tty:
        argv = ["script", "-qefc", shlex.join(argv), "/dev/null"]

    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    with tempfile.TemporaryFile() as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                cwd=case.cwd or d, env=env, preexec_fn=limits, start_new_session=True)
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                timed_out = True
                break
            time.sleep(0.05)
        wall = time.monotonic() - t0
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        output = out.read().decode(errors="replace")
    after = {p: sha(p) for p in case.watch}
    changed = [p.name + (" deleted" if after[p] is None else "") for p in case.watch
               if after[p] != before[p]]
    exit_text = "timeout" if timed_out else \
        f"killed ({signal.Signals(-code).name})" if code < 0 else str(code)
    return {"case": case.name, "command": command_text(case, d), "exit": exit_text,
            "line": shown_line(output, case.pick, d),
            "marker_absent": None if case.marker is None else not os.path.lexists(case.marker),
            "sha256_unchanged": not changed, "changed": changed,
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "wall_s": round(wall, 1),
            "output_tail": output[-2000:]}


def shown_line(output: str, pick: re.Pattern, d: Path, width: int = 140) -> str:
    lines = [ln.rstrip() for ln in output.replace("\r", "").splitlines() if ln.strip()]
    found = [ln for ln in lines if pick.search(ANSI.sub("", ln))]
    line = lines[-1] if found and "Traceback" in found[0] else found[0] if found else "(none)"
    line = line.strip().replace(str(d), "D").replace("\x1b", "\\x1b")
    return line if len(line) <= width else line[:width - 1] + "…"


def command_text(case: Case, d: Path) -> str:
    env = " ".join(f"{k}={v}" if v is not None else f"-u {k}" for k, v in case.env.items())
    text = ("(pty) " if case.tty else "") + (f"env {env} " if env else "") + "idaudit " + \
        shlex.join(case.args)
    return text.replace(str(d), "D")


def table(rows: list[dict]) -> str:
    def cell(v):
        return "—" if v is None else ("yes" if v is True else "**NO**" if v is False else
                                      str(v).replace("|", "\\|"))
    head = "| case | command | exit | first error line | marker absent | sha256 unchanged | " \
           "peak RSS MB | wall s |\n|---|---|---|---|---|---|---|---|\n"
    return head + "".join(
        f"| {r['case']} | `{cell(r['command'])}` | {r['exit']} | `{cell(r['line'])}` | "
        f"{cell(r['marker_absent'])} | {cell(r['sha256_unchanged'])}"
        f"{' (' + ', '.join(r['changed']) + ')' if r['changed'] else ''} | {r['peak_rss_mb']} | "
        f"{r['wall_s']} |\n" for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=str(SRC), help="the src/ directory to run (default: this "
                    "checkout's)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs the CLI")
    ap.add_argument("--json", type=Path, help="also write the rows (with each output's tail) here")
    ap.add_argument("--with-reacher", action="store_true", help="case 6: render and tamper with a "
                    "Reacher evaluation cache (needs the reacher extra and GL; slow)")
    ap.add_argument("--only", action="append", help="run the cases whose name contains this "
                    "(case-insensitive; repeatable)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per case (default 300)")
    ap.add_argument("--cap-gib", type=float, default=12, help="address-space cap per case in GiB "
                    "(default 12; a CUDA torch maps ~3 GB at import)")
    args = ap.parse_args()
    if os.sep in args.python:  # the cases run in a temporary directory
        args.python = str(Path(args.python).absolute())
    src, cap = str(Path(args.src).resolve()), int(args.cap_gib * 2**30)
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        d = Path(tmp)
        ck, enc = d / "c.safetensors", d / "pool.pt"
        torch.jit.script(_Pool()).save(str(enc))
        trained = run_case(Case("setup: train", ["train", *COUPLING, "--steps", "20", "--eval-every",
                                                 "20", "--n-eval", "500", "--out", str(ck),
                                                 "--quiet"]), args.python, src, d, 600, cap)
        if trained["exit"] != "0":
            sys.exit(f"training the shared checkpoint failed:\n{trained['output_tail']}")
        cases = [*lewm_cases(d), *torchscript_cases(d), *embed_cases(d, ck), *timm_cases(d),
                 *bomb_cases(d), *(reacher_cases(d, enc) if args.with_reacher else []),
                 *small_cases(d, ck, enc), *ansi_cases(d)]
        rows = []
        for case in cases:
            if args.only and not any(o.lower() in case.name.lower() for o in args.only):
                continue
            print(f"… {case.name}", file=sys.stderr, flush=True)
            rows.append(run_case(case, args.python, src, d, args.timeout, cap))
            print(f"  exit {rows[-1]['exit']}, {rows[-1]['peak_rss_mb']} MB, {rows[-1]['wall_s']} s:"
                  f" {rows[-1]['line']}", file=sys.stderr, flush=True)
    print(f"src: {src}  python: {args.python}  cap: {args.cap_gib:g} GiB address space, "
          f"timeout {args.timeout:g} s\n")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"src": src, "python": args.python, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
