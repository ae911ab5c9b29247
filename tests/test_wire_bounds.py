"""What the cage sends is bounded before it is read, and every text from it is one line.

A program in the cage holds the pipe idaudit reads its answers from (descriptor 4), so it can
send any bytes at all: a frame declaring gigabytes, a header no JSON parser takes, a refusal
of ten thousand characters with newlines in it. idaudit must bound each answer by what its
request expects — ``embed``: the rows it sent × a bounded width, float32; ``load``: arrays
only where they can apply, within the memory left — from the header alone, read each array
once into its own buffer, and refuse a malformed header in one line (exit 2, never the exit 5
of an internal error). Memory is measured in a process of its own (its peak RSS, VmHWM), so
that this process's state says nothing of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import one_line, run

from idaudit.core.errors import one_line as one_line_text
from idaudit.loading import confine, wire
from idaudit.loading.cage import LAST_LINE_LIMIT, MAX_WIDTH, TEXT_LIMIT

GIB3 = 3 << 30  # the bytes a hostile answer declares: 3 GiB of float32
RSS_LIMIT_KB = 300 * 1024  # idaudit's peak RSS while it refuses them (the wire alone)
#: what refusing 3 GiB may add to idaudit's peak over refusing a small frame the same way:
#: the whole command's RSS depends on the torch build (a CUDA wheel's libraries add ≈ 250 MB)
GROWTH_LIMIT_KB = 32 * 1024

needs_cage = pytest.mark.skipif(confine.why_no_cage() is not None,
                                reason=f"no cage here: {confine.why_no_cage()}")

# a trusted pickle (--trust-code) whose Python code writes to the cage's answer pipe itself:
# a forged frame (``raw``, its header) and then ``zeros`` bytes of array data, while it is
# unpickled ("load") or in its forward ("embed"), and ends; or (``shout``) it writes a line
# to its stderr and exits (1)
FORGER = textwrap.dedent('''
    import os, sys, torch

    def send(data):
        view = memoryview(data)
        while view:
            view = view[os.write(4, view):]

    class Forge(torch.nn.Module):
        def __init__(self, when, raw, zeros=0, shout=None):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.when, self.raw, self.zeros, self.shout = when, raw, zeros, shout

        def __setstate__(self, state):
            super().__setstate__(state)
            if state["when"] == "load":
                self.forge()

        def forward(self, x):
            if self.when == "embed":
                self.forge()
            return self.lin(x)

        def forge(self):
            if self.shout is not None:
                sys.stderr.write(self.shout + "\\n")
                sys.stderr.flush()
                os._exit(1)
            raw = self.raw.encode()
            send(len(raw).to_bytes(8, "little") + raw)
            chunk, left = bytes(1 << 24), self.zeros
            while left > 0:
                left -= os.write(4, chunk[:min(left, len(chunk))])
            os._exit(0)  # its own answer never follows
''')


def _header(message: object, arrays: list[dict]) -> str:
    return json.dumps({"message": message, "arrays": arrays})


def _forged(root: Path, when: str, raw: str, zeros: int = 0, shout: str | None = None) -> Path:
    """A torch.save file of a :data:`FORGER` program (the module written beside it)."""
    import importlib

    (root / "forger.py").write_text(FORGER)
    sys.modules.pop("forger", None)
    forger = importlib.import_module("forger")
    path = root / f"forge_{when}.pt"
    torch.save(forger.Forge(when, raw, zeros, shout), str(path))
    return path


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("forger", None)


def _peak_rss(code: str, cwd: Path, *args: str) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in kB) of ``code`` run in a fresh Python. The peak is
    VmHWM, its own address space's: getrusage's ru_maxrss would carry the RSS of the
    process that forked it (Linux keeps the larger across fork and exec)."""
    wrapper = ("import atexit, sys\n"
               "def _peak():\n"
               "    with open('/proc/self/status') as f:\n"
               "        kb = next(ln.split()[1] for ln in f if ln.startswith('VmHWM:'))\n"
               "    sys.stderr.write('\\nPEAK %s\\n' % kb)\n"
               "atexit.register(_peak)\n" + code)
    res = subprocess.run([sys.executable, "-c", wrapper, *args], cwd=cwd, capture_output=True,
                         text=True, timeout=600)
    peak = int(res.stderr.rsplit("PEAK ", 1)[1].split()[0])
    return res.returncode, res.stderr.rsplit("\nPEAK ", 1)[0].strip(), peak


IDAUDIT = "from idaudit._entry import main\nsys.argv = ['idaudit'] + sys.argv[1:]\nmain()\n"


# --- the wire alone: a pipe fed by a thread --------------------------------------------------

FEED = textwrap.dedent('''
    import json, os, sys, threading
    from idaudit.loading import wire

    nbytes, max_bytes = int(sys.argv[1]), float(sys.argv[2])
    r, w = os.pipe()

    def feed():
        header = json.dumps({"message": {"h": {"__array__": 0}},
                             "arrays": [{"dtype": "float32", "shape": [2, nbytes // 8]}]}).encode()
        try:
            os.write(w, len(header).to_bytes(8, "little") + header)
            chunk, left = bytes(1 << 24), nbytes
            while left:
                left -= os.write(w, chunk[:min(left, len(chunk))])
        except OSError:
            pass
        finally:
            os.close(w)

    threading.Thread(target=feed, daemon=True).start()
    try:
        got = wire.read_frame(os.fdopen(r, "rb"), max_bytes)
        print("read", got["h"].shape, got["h"].nbytes, file=sys.stderr)
    except wire.WireError as exc:
        print("refused:", exc, file=sys.stderr)
''')


def test_a_declared_3_gib_embedding_is_refused_from_its_header(tmp_path):
    """What an ``embed`` answer for 2 inputs may hold — 2 × MAX_WIDTH float32 — is 32 MiB; a
    frame declaring 3 GiB is refused before a byte of it is read (the old reader held twice
    the 3 GiB: 6.3 GB)."""
    code, err, peak = _peak_rss(FEED, tmp_path, str(GIB3), str(2 * MAX_WIDTH * 4))
    assert code == 0, err
    assert err == f"refused: arrays of {GIB3} bytes, more than the {2 * MAX_WIDTH * 4} expected"
    assert peak <= RSS_LIMIT_KB, peak


def test_an_allowed_array_is_read_once_into_its_own_buffer(tmp_path):
    """256 MiB within the bound: read with readinto into one buffer, so the peak grows by
    the array, not twice it."""
    size = 256 << 20
    code, err, peak = _peak_rss(FEED, tmp_path, str(size), str(size))
    assert code == 0 and err == f"read (2, {size // 8}) {size}", err
    code, _, base = _peak_rss(FEED, tmp_path, "0", "0")
    assert code == 0
    assert (peak - base) * 1024 <= size * 1.15, (peak, base)  # one copy (two: ≥ 512 MiB)


def _frame(header: bytes) -> bytes:
    return len(header).to_bytes(8, "little") + header


@pytest.mark.parametrize("header", [
    b'{"message": {}, "arrays": [{"dtype": "float32", "shape": [' + b"9" * 5000 + b"]}]}",
    b'{"message": ' + b"1" * 5000 + b', "arrays": []}',
    _header({}, [{"dtype": "float32", "shape": [True, 2]}]).encode(),
    _header({}, [{"dtype": "float32", "shape": [-1]}]).encode(),
    _header({}, [{"dtype": "float32", "shape": [2.0]}]).encode(),
    _header({}, [{"dtype": "float32", "shape": "12"}]).encode(),
    _header({}, [{"dtype": ["float32"], "shape": [1]}]).encode(),
    _header({}, [{"dtype": "object", "shape": [1]}]).encode(),
    _header({}, [{"dtype": "float32", "shape": [1]}] * 2)[:-1].encode() + b"{",
    _header({}, [{"dtype": "float64", "shape": [0, 2**61, 2**61]}]).encode(),
    _header({"h": {"__array__": True}}, [{"dtype": "float32", "shape": [1]}]).encode(),
    _header({"h": {"__array__": 1}}, [{"dtype": "float32", "shape": [1]}]).encode(),
    json.dumps([1, 2]).encode(),
    json.dumps({"message": {}, "arrays": {"0": 1}}).encode(),
    b"[" * 100_000 + b"]" * 100_000,
    b'{"message": {}, "arrays": [' + b"[" * 990 + b"]" * 990 + b"]}",
    b"\xff\xfe",
], ids=["huge_int_shape", "huge_int_message", "bool_size", "negative", "float_size",
        "text_shape", "list_dtype", "object_dtype", "broken_json", "zero_but_huge",
        "bool_reference", "no_such_array", "header_list", "arrays_dict", "deep", "deep_meta",
        "not_utf8"])
def test_a_malformed_header_is_a_wire_error(header):
    import io

    with pytest.raises(wire.WireError):
        wire.read_frame(io.BytesIO(_frame(header) + bytes(64)), 1e9)


def test_the_reader_refuses_from_the_header_before_reading(tmp_path):
    """``check`` sees the declared arrays (place, dtype, shape) and may refuse them: the
    stream is then left where the header ends."""
    import io

    seen: list = []

    def check(declared):
        seen.extend(declared)
        raise ValueError("not here")

    raw = _header({"arrays": {"h": {"__array__": 0}}, "n": 1},
                  [{"dtype": "float32", "shape": [3, 4]}]).encode()
    stream = io.BytesIO(_frame(raw) + bytes(48))
    with pytest.raises(ValueError, match="not here"):
        wire.read_frame(stream, 1e9, check)
    assert seen == [("arrays/h", "float32", (3, 4))]
    assert stream.tell() == 8 + len(raw)


# --- the cage: a program that forges its answers -----------------------------------------------

@needs_cage
def test_arrays_that_cannot_apply_are_refused_before_their_bytes(workdir):
    """A trusted pickle whose load answers 3 GiB of arrays under --world: refused with the
    audit's own line from the header; idaudit's peak no higher than where it refuses 256
    bytes the same way (before: 6.5 GB, then the same refusal)."""
    peaks = []
    for rows in (GIB3 // 16, 16):  # 3 GiB, then 256 bytes: the same refusal
        raw = _header({"arrays": {"h": {"__array__": 0}}},
                      [{"dtype": "float32", "shape": [rows, 4]}])
        path = _forged(workdir, "load", raw, zeros=rows * 16)
        code, err, peak = _peak_rss(IDAUDIT, workdir, "audit", str(path), "--trust-code",
                                    "--world", "coupling", "--dim", "4", "--n-eval", "100")
        assert code == 2, err
        assert err == ("error: arrays are audited as they are: --world, --n-eval, --dim do not "
                       "apply")
        peaks.append(peak)
    assert peaks[0] - peaks[1] <= GROWTH_LIMIT_KB, peaks


@needs_cage
def test_a_3_gib_embedding_answer_is_refused_before_its_bytes(workdir):
    """A forward that answers 3 GiB for the 2 inputs idaudit tries first: refused from the
    header (wider than MAX_WIDTH); idaudit's peak no higher than where it refuses a frame
    one value too wide (before: 6.5 GB)."""
    peaks = []
    for width in (GIB3 // 8, MAX_WIDTH + 1):  # 3 GiB, then just too wide: the same refusal
        raw = _header({"h": {"__array__": 0}}, [{"dtype": "float32", "shape": [2, width]}])
        path = _forged(workdir, "embed", raw, zeros=8 * width)
        code, err, peak = _peak_rss(IDAUDIT, workdir, "audit", str(path), "--trust-code",
                                    "--world", "coupling", "--dim", "4", "--n-eval", "100")
        assert code == 2, err
        assert err == (f"error: {path}: the program's process answered embeddings {width} "
                       f"values wide for 2 inputs, wider than the {MAX_WIDTH} a supported "
                       "encoder gives")
        peaks.append(peak)
    assert peaks[0] - peaks[1] <= GROWTH_LIMIT_KB, peaks


@needs_cage
@pytest.mark.parametrize("when,raw,want", [
    ("load", _header({"arrays": {"h": {"__array__": 0}}},
                     [{"dtype": "float32", "shape": [GIB3 // 16, 4]}]),
     None),  # arrays that apply: within the memory left, read
    ("load", '{"message": {"encoder": true}, "arrays": [{"dtype": "float32", "shape": [' +
     "9" * 5000 + "]}]}", "a header that is no JSON (Exceeds the limit (4300 digits)"),
    ("load", _header({"encoder": True}, [{"dtype": "float32", "shape": [True]}]),
     "an array shape that is no list of sizes ([true])"),
    ("load", _header({"encoder": True}, [{"dtype": "float32", "shape": [-4]}]),
     "an array shape that is no list of sizes ([-4])"),
    ("load", _header({"arrays": {"evil\n::warning::x": {"__array__": 0}}},
                     [{"dtype": "float32", "shape": [1]}]),
     "an array at 'arrays/evil\\n::warning::x', where a load answers with arrays named z, h"),
    ("load", _header({"arrays": [1, 2]}, []),
     "an answer to its load that is none of an encoder, arrays by name and an embedding"),
    ("load", _header({"what": 1}, []),
     "an answer to its load that is none of an encoder, arrays by name and an embedding"),
    ("embed", _header({"h": {"__array__": 0}}, [{"dtype": "float64", "shape": [2, 4]}]),
     "answered an array float64 (2, 4) for 2 inputs; expected (batch, m) float32"),
    ("embed", _header(7, []), "an answer that is no object but int"),
], ids=["arrays_apply", "huge_int", "bool_size", "negative", "bad_name", "arrays_list",
        "no_kind", "float64", "not_object"])
def test_a_forged_answer_is_one_line_exit_2(workdir, when, raw, want):
    path = _forged(workdir, when, raw)
    args = ["audit", str(path), "--trust-code"]
    if when == "embed":
        args += ["--world", "coupling", "--dim", "4", "--n-eval", "100"]
    res = run(*args)
    if want is None:  # the 3 GiB of h apply (no --world): within the memory left, the
        want = "the program's process exited (0) before it answered"  # reader waits for them
    one_line(res, 2, want)
    assert len(res.output.strip()) <= 600, res.output


LONG = "bad\n::warning file=x::pwned\n```\n# heading\n" + "y" * 10_000 + "\x1b[31m\u2028end"


@needs_cage
@pytest.mark.parametrize("key", ["error", "failed"])
def test_a_cage_text_with_newlines_and_10000_characters_is_one_bounded_line(workdir, key):
    path = _forged(workdir, "embed", _header({key: LONG, "exit": 2}, []))
    res = run("audit", str(path), "--trust-code", "--world", "coupling", "--dim", "4",
              "--n-eval", "100")
    one_line(res, 2, "bad\\n::warning file=x::pwned\\n```\\n# heading\\nyyy")
    line = res.output.strip()
    assert "\x1b" not in line and "\u2028" not in line and " … " in line, line
    assert "yyy\\x1b[31m\\u2028end" in line  # its end kept: the middle is cut
    if key == "error":
        assert line.startswith("error: bad\\n::warning") and line.endswith("\\u2028end")
        assert len(line) == len("error: ") + TEXT_LIMIT
    else:  # the encoder's sentence around it: "the encoder failed on inputs of …: TEXT; …"
        assert len(line) <= TEXT_LIMIT + 500, len(line)


@needs_cage
def test_the_last_stderr_line_of_a_dead_cage_is_one_bounded_line(workdir):
    shout = "an earlier line\nlast\x1b[2J\tline ::warning:: " + "z" * 1000 + " end"
    path = _forged(workdir, "embed", "", shout=shout)
    res = run("audit", str(path), "--trust-code", "--world", "coupling", "--dim", "4",
              "--n-eval", "100")
    one_line(res, 2, "the program's process exited (1) before it answered (inside the cage); "
                     "it said last: last\\x1b[2J\\tline ::warning:: zzz")
    said = res.output.strip().split("it said last: ", 1)[1]
    assert len(said) == LAST_LINE_LIMIT and " … " in said and said.endswith("z end"), said


def test_one_line_escapes_breaks_and_keeps_both_ends():
    assert one_line_text("a\nb\tc\u2028d\x1b[0m") == "a\\nb\\tc\\u2028d\\x1b[0m"
    text = one_line_text("start " + "x" * 5000 + " the cage's note", 100)
    assert len(text) == 100 and text.startswith("start xxx") and \
        text.endswith("x the cage's note") and " … " in text
    assert one_line_text(12345678901234567890, 20) == "12345678901234567890"
    assert len(one_line_text("é" * 50, 5)) == 20  # at least 20 characters, whatever is asked
