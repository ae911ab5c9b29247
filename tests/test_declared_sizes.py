"""Issue 37, item 4: declared sizes before work. An array's declared shape is checked before
anything is read or computed: at most ``limits.ARRAY_ELEMENTS`` elements, no more than its
storage holds (a zero or overlapping stride: ``expand``, ``as_strided``), and the memory the
audit's float copies take within what is left — in torch.save (the dry run of the pickle,
before torch.load), .npz / .npy (their headers, memory-mapped members too) and safetensors
(its header, before the file is mapped) alike.

Each hostile file is a few KiB on disk (or sparse: a hole the file system never stores) and
declares 10⁷ × 1000 elements; before, ``idaudit audit`` of the zero-stride torch.save file
computed for 99 s and ended "inconclusive: collapsed". Each is refused through ``python -m
idaudit`` (a fresh process, as a user runs it; the seconds it took are printed, not asserted)
and through the Python API, with one line and exit 2.
"""

from __future__ import annotations

import io
import json
import re
import resource
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import one_line, run
from safetensors.torch import save_file

import idaudit
from idaudit.core.errors import IdauditError
from idaudit.core.limits import ARRAY_ELEMENTS, check_elements, check_view
from idaudit.loading.torch_file_sizes import torch_file_bytes

ROWS, COLS = 10_000_000, 1000  # 10¹⁰ elements: 37 GiB as float32, 75 GiB as the audit's float64
LINEAR = {"arch": "torch.nn:Linear", "arch_kwargs": {"in_features": 4, "out_features": 4},
          "world": "coupling", "dim": 4}  # the Python API's options, and the CLI's flags


# ---- files that declare more than they hold -----------------------------------------------


def npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """The bytes of a ``.npy`` header (magic included) declaring ``shape`` of ``descr``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False,
                                               "shape": shape})
    return buf.getvalue()


def sparse_zip(path: Path, members: dict[str, tuple[bytes, int]]) -> Path:
    """A zip64 of stored members, each ``(bytes, hole)``: its bytes, then ``hole`` bytes the
    file never writes (sparse: nothing on disk), as numpy.savez lays out a large array."""
    central = []
    with open(path, "wb") as f:
        for name, (data, hole) in members.items():
            raw, size, offset = name.encode(), len(data) + hole, f.tell()
            crc = 0 if hole else zlib.crc32(data)  # a hole is never read through the zip
            extra = struct.pack("<HHQQ", 1, 16, size, size)
            f.write(struct.pack("<4s5H3I2H", b"PK\x03\x04", 45, 0, 0, 0, 0x21, crc, 2**32 - 1,
                                2**32 - 1, len(raw), len(extra)) + raw + extra + data)
            f.seek(hole, 1)
            central.append((raw, crc, size, offset))
        start = f.tell()
        for raw, crc, size, offset in central:
            extra = struct.pack("<HHQQQ", 1, 24, size, size, offset)
            f.write(struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 45, 45, 0, 0, 0, 0x21, crc,
                                2**32 - 1, 2**32 - 1, len(raw), len(extra), 0, 0, 0, 0,
                                2**32 - 1) + raw + extra)
        end = f.tell()
        f.write(struct.pack("<4sQ2H2I4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, len(central),
                            len(central), end - start, start))
        f.write(struct.pack("<4sIQI", b"PK\x06\x07", 0, end, 1))
        f.write(struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 2**16 - 1, 2**16 - 1, 2**32 - 1,
                            2**32 - 1, 0))
    return path


def sparse_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], int]]) -> Path:
    """A safetensors file of ``name → (dtype, shape, bytes per element)`` whose data is one
    hole of exactly the size its header declares."""
    header, at = {}, 0
    for name, (dtype, shape, size) in tensors.items():
        nbytes = int(np.prod(shape)) * size
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + nbytes]}
        at += nbytes
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + at)
    return path


def zero_stride_pt(d: Path, legacy: bool = False) -> Path:
    """What ``torch.save`` writes for expanded tensors: shape 10⁷ × 1000, strides (0, 0), one
    element of storage."""
    one = torch.zeros(1)
    path = d / "expanded.pt"
    torch.save({"h": one.expand(ROWS, COLS), "z": one.expand(ROWS, 2)}, str(path),
               _use_new_zipfile_serialization=not legacy)
    return path


def overlapping_pt(d: Path) -> Path:
    """10¹⁰ elements over a storage of about 10⁶ (strides (1, 1): each row the next one shifted
    by one element), 4 MB on disk."""
    h = torch.as_strided(torch.zeros(1_000_000 + 10 * COLS - 1), (1_000_000, 10 * COLS), (1, 1))
    path = d / "strided.pt"
    torch.save({"h": h, "z": torch.zeros(1).expand(1_000_000, 2)}, str(path))
    return path


def expanded_weights(d: Path) -> Path:
    """A state dict whose bfloat16 weight is 10¹⁰ elements over one: making weights float32
    (as every state dict is prepared) would have allocated 37 GiB."""
    state = torch.nn.Linear(4, 4).state_dict()
    state["weight"] = torch.zeros(1, dtype=torch.bfloat16).expand(100_000, 100_000)
    torch.save(state, str(d / "weights.pt"))
    return d / "weights.pt"


def npz_headers(d: Path, compression: int = zipfile.ZIP_STORED) -> Path:
    """An .npz whose members are their headers alone (stored or deflated): 10⁷ × 1000 declared."""
    path = d / "declared.npz"
    with zipfile.ZipFile(path, "w", compression) as zf:
        zf.writestr("z.npy", npy_header((ROWS, 2)))
        zf.writestr("h.npy", npy_header((ROWS, COLS)))
    return path


def npz_mapped(d: Path, rows: int = ROWS, cols: int = COLS) -> Path:
    """An .npz whose stored members hold what their headers declare (zeros, in a hole), so
    they are memory-mapped: nothing to read into memory, only compute."""
    return sparse_zip(d / "mapped.npz", {"z.npy": (npy_header((rows, 2)), rows * 2 * 4),
                                         "h.npy": (npy_header((rows, cols)), rows * cols * 4)})


def safetensors_sparse(d: Path) -> Path:
    return sparse_safetensors(d / "declared.safetensors", {"z": ("F32", (ROWS, 2), 4),
                                                           "h": ("F32", (ROWS, COLS), 4)})


def npy_pair(d: Path) -> list[Path]:
    """Two .npy embeddings (consistency) of 10⁷ × 1000 float32 zeros, sparse."""
    paths = []
    for name in ("a.npy", "b.npy"):
        header = npy_header((ROWS, COLS))
        with open(d / name, "wb") as f:
            f.write(header)
            f.truncate(len(header) + ROWS * COLS * 4)
        paths.append(d / name)
    return paths


DECLARED = "declares shape (10000000, 1000): 10000000000 elements, more than the 4294967296"
REPEATS = "zero or overlapping strides repeat its elements"
CASES = [  # (name, build(d) → path or paths, command, options, fragment)
    ("torch.save zero stride", zero_stride_pt, "audit", {},
     "expanded.pt: tensor 'h' declares shape (10000000, 1000) (10000000000 elements, strides "
     f"(0, 0)) over a storage of 1 element: {REPEATS}"),
    ("torch.save legacy zero stride", lambda d: zero_stride_pt(d, legacy=True), "audit", {},
     "tensor 'h' declares shape (10000000, 1000) (10000000000 elements, strides (0, 0)) over "
     "a storage of 1 element"),
    ("torch.save overlapping strides", overlapping_pt, "audit", {},
     "tensor 'h' declares shape (1000000, 10000) (10000000000 elements, strides (1, 1)) over "
     f"a storage of 1009999 elements: {REPEATS}"),
    ("torch.save expanded weights", expanded_weights, "audit", LINEAR,
     "tensor 'weight' declares shape (100000, 100000) (10000000000 elements, strides (0, 0)) "
     "over a storage of 1 element"),
    ("npz stored headers", npz_headers, "audit", {}, f"declared.npz: array 'h' {DECLARED}"),
    ("npz deflated headers", lambda d: npz_headers(d, zipfile.ZIP_DEFLATED), "audit", {},
     f"declared.npz: array 'h' {DECLARED}"),
    ("npz memory-mapped", npz_mapped, "audit", {}, f"mapped.npz: array 'h' {DECLARED}"),
    ("safetensors", safetensors_sparse, "audit", {},
     f"declared.safetensors: array 'h' {DECLARED}"),
    ("npy consistency", npy_pair, "consistency", {}, f"a.npy: array 'h' {DECLARED}"),
]


def _cli(args: list[str], cwd: Path, memory: int | None = None
         ) -> tuple[subprocess.CompletedProcess, float]:
    """``python -m idaudit ARGS`` in a fresh process (its address space limited to ``memory``
    bytes where given) and the seconds it took."""
    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "idaudit", *args], cwd=cwd, capture_output=True,
                         text=True, timeout=600, preexec_fn=limit)
    return res, time.monotonic() - start


def _refused(res: subprocess.CompletedProcess, fragment: str) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("name,build,command,options,fragment", CASES,
                         ids=[c[0] for c in CASES])
def test_declared_sizes_are_refused_before_any_work(tmp_path, name, build, command, options,
                                                    fragment):
    built = build(tmp_path)
    paths = built if isinstance(built, list) else [built]
    assert sum(p.stat().st_blocks * 512 for p in paths) < 8 << 20  # small, or sparse, on disk
    flags = [a for k, v in options.items() for a in
             ("--" + k.replace("_", "-"), json.dumps(v) if isinstance(v, dict) else str(v))]
    res, seconds = _cli([command, *map(str, paths), *flags], tmp_path)
    line = _refused(res, fragment)
    print(f"\n{name}: exit {res.returncode} in {seconds:.2f} s: {line}")
    api = idaudit.consistency if command == "consistency" else idaudit.audit
    with pytest.raises(IdauditError, match=re.escape(fragment)):
        api(*map(str, paths), **options)


def test_the_audits_copies_are_checked_against_the_memory_left(tmp_path):
    """Within the element limit, an .npz of 2³¹ one-byte integers (memory-mapped: nothing to
    read) that the audit would copy to float64 (16 GiB) is refused where the process may take
    only 4 GiB more, by the CLI and the Python API alike."""
    rows = 2**21
    sparse_zip(tmp_path / "ints.npz", {"z.npy": (npy_header((rows, 2), "<f8"), rows * 16),
                                       "h.npy": (npy_header((rows, 1024), "|u1"), rows * 1024)})
    fragment = ("ints.npz: reading its arrays and the audit's float copies of them needs up to "
                "16.0 GiB of memory, but only")
    res, seconds = _cli(["audit", "ints.npz"], tmp_path, memory=4 << 30)
    print(f"\nmemory: exit {res.returncode} in {seconds:.2f} s: {_refused(res, fragment)}")
    code = ("import idaudit, resource\nresource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))"
            "\ntry:\n    idaudit.audit('ints.npz')\nexcept idaudit.IdauditError as e:\n"
            "    print(e)")
    api = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert fragment in api.stdout, api.stdout + api.stderr


# ---- what holds what it declares is read as before --------------------------------------


def test_an_array_at_the_limit_reaches_the_audit(tmp_path):
    """2³² elements exactly (an .npz of 16 GiB of float32, memory-mapped and sparse) pass the
    declared-size check and reach the audit's own checks (here: z's rows are not h's); one row
    more is refused before them."""
    assert check_elements((2**22, 2**10), "h") == ARRAY_ELEMENTS
    with pytest.raises(IdauditError, match=r"^h declares shape \(4194305, 1024\): 4294968320 "):
        check_elements((2**22 + 1, 2**10), "h")
    for rows, fragment in ((2**22, "z has 3 rows but h has 4194304"),
                           (2**22 + 1, "array 'h' declares shape (4194305, 1024): 4294968320")):
        buf = io.BytesIO()
        np.save(buf, np.zeros((3, 2), np.float32))
        sparse_zip(tmp_path / "edge.npz", {"z.npy": (buf.getvalue(), 0),
                                           "h.npy": (npy_header((rows, 1024)), rows * 4096)})
        one_line(run("audit", tmp_path / "edge.npz"), 2, fragment)


def test_views_that_hold_their_elements_are_read(tmp_path):
    """A slice of a larger storage, a transposed tensor, and a buffer expanded along a
    dimension of one (transformers' position_ids) hold every element they declare."""
    rng = torch.Generator().manual_seed(0)
    z = torch.randn(2, 1000, generator=rng)
    wide = torch.cat([z.T, 0.1 * torch.randn(1000, 6, generator=rng)], 1)
    torch.save({"z": z.T, "h": wide[:, :4]}, str(tmp_path / "views.pt"))
    check_view((1000, 4), (8, 1), 8000, "h")  # as many elements as its storage: held
    report = idaudit.audit(str(tmp_path / "views.pt"), gauss_sims=0)
    assert report.verdict == "ungated" and report.metrics["r2_h_to_z_heldout"] > 0.99
    one_line(run("audit", tmp_path / "views.pt", "--min-r2", "0.9", "--gauss-sims", "0"), 0,
             "pass")
    np.savez(tmp_path / "plain.npz", z=z.T.numpy(), h=wide[:, :4].numpy())
    save_file({"z": z.T.contiguous(), "h": wide[:, :4].contiguous()},
              str(tmp_path / "plain.safetensors"))
    for name in ("plain.npz", "plain.safetensors"):
        assert idaudit.audit(str(tmp_path / name), gauss_sims=0).metrics[
            "r2_h_to_z_heldout"] == pytest.approx(report.metrics["r2_h_to_z_heldout"])
    state = {"position_ids": torch.arange(512).expand(1, -1), "w": torch.zeros(3, 3).T}
    torch.save(state, str(tmp_path / "buffers.pt"))
    assert torch_file_bytes(tmp_path / "buffers.pt") > 512 * 8


def test_arrays_from_python_are_held_to_the_same_rule():
    z = np.zeros((ROWS, 2), np.float32)
    with pytest.raises(IdauditError, match=r"^h declares shape \(10000000, 1000\) \(10000000000 "
                       r"elements, strides \(0, 0\)\) over a storage of 1 element: zero or "):
        idaudit.audit(z=z, h=np.broadcast_to(np.float32(0), (ROWS, COLS)))
    with pytest.raises(IdauditError, match=r"^h declares shape \(10000000, 1000\) .* strides "
                       r"\(0, 1\)\) over a storage of 1000 elements"):
        idaudit.audit(z=z, h=torch.zeros(COLS).expand(ROWS, COLS))
