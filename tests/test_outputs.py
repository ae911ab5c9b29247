"""Outputs (issue 18): an output never destroys an input, temporaries of live writers are
never removed (and those of killed ones always are), concurrent writers of one report all
succeed, a path the write would refuse is refused before the work (without leaving
directories behind), a killed sweep leaves no process behind, and a failed train leaves no
stale checkpoint."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import one_line, run

from idaudit.core.atomic import atomic_write, clean_stale_temporaries
from idaudit.core.errors import IdauditError
from idaudit.core.jsontext import write_json
from idaudit.core.outputs import check_outputs

IDAUDIT = [sys.executable, "-m", "idaudit.cli"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("outputs")
    rng = np.random.default_rng(5)
    z = rng.standard_normal((600, 3))
    np.savez(d / "good.npz", z=z, h=z)
    assert run("world", "spiral", "--pairs", "400", "--out", d / "w.safetensors").exit_code == 0
    return d


def fresh_copy(files, tmp_path, name="good.npz"):
    copy = tmp_path / name
    shutil.copy(files / name, copy)
    return copy


def unchanged(path, files, name="good.npz"):
    return path.exists() and path.read_bytes() == (files / name).read_bytes()


# ---- 1. an output that is an input ----------------------------------------------------


@pytest.mark.parametrize("flag", ["--json", "--junit", "--markdown"])
def test_a_report_path_that_is_the_audited_file_is_refused_and_the_file_kept(files, tmp_path,
                                                                            flag):
    good = fresh_copy(files, tmp_path)
    one_line(run("audit", good, flag, good, "--min-r2", "0.5"), 2, "is the same file as the input")
    assert unchanged(good, files)
    # the same file under another name: through a symbolic link, a hard link, a detour
    link = tmp_path / "link.npz"
    link.symlink_to(good)
    hard = tmp_path / "hard.json"
    os.link(good, hard)
    one_line(run("audit", link, flag, good), 2, "is the same file as the input")
    one_line(run("audit", good, flag, hard), 2, "is the same file as the input")
    (tmp_path / "sub").mkdir()
    one_line(run("audit", good, flag, tmp_path / "sub" / ".." / "good.npz"), 2, "same file")
    assert unchanged(good, files) and unchanged(hard, files)


def test_gate_data_and_other_commands_inputs_are_protected(files, tmp_path):
    good = fresh_copy(files, tmp_path)
    pairs = fresh_copy(files, tmp_path, "w.safetensors")
    gate = tmp_path / "gate.toml"
    gate.write_text("[min]\nr2_h_to_z_heldout = 0.5\n")
    one_line(run("audit", good, "--gate", gate, "--junit", gate), 2,
             "--junit " + str(gate) + ": is the same file as --gate")
    one_line(run("audit", good, "--data", pairs, "--json", pairs), 2, "same file as --data")
    second = tmp_path / "second.npz"
    shutil.copy(good, second)
    one_line(run("consistency", good, second, "--markdown", second), 2, "same file as the run")
    one_line(run("plan", good, "--json", good), 2, "same file as the target")
    one_line(run("plan", good, "--data", pairs, "--plot", pairs), 2, "same file as --data")
    assert unchanged(good, files) and unchanged(pairs, files, "w.safetensors")
    assert gate.read_text() == "[min]\nr2_h_to_z_heldout = 0.5\n"
    # a file of an input directory (a Reacher dataset's meta.json) is the input too, and a
    # new file is never written there (issue 41)
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "meta.json").write_text("{}")
    one_line(run("audit", good, "--data", dataset, "--json", dataset / "meta.json"), 2,
             "is a file of --data")
    assert (dataset / "meta.json").read_text() == "{}"
    one_line(run("audit", good, "--data", dataset, "--json", dataset / "new.json"), 2,
             "lies inside --data")
    assert not (dataset / "new.json").exists()


def test_train_never_replaces_its_data_with_the_checkpoint_or_its_log(files, tmp_path):
    pairs = fresh_copy(files, tmp_path, "w.safetensors")
    one_line(run("train", "--data", pairs, "--out", pairs, "--epochs", "1", "--quiet"), 2,
             "--out " + str(pairs) + ": is the same file as --data")
    log_named = tmp_path / "c.log.json"
    shutil.copy(pairs, log_named)
    one_line(run("train", "--data", log_named, "--out", tmp_path / "c.safetensors", "--epochs",
                 "1", "--quiet"), 2, "--out (its log)")
    assert unchanged(pairs, files, "w.safetensors")
    assert unchanged(log_named, files, "w.safetensors")
    assert not (tmp_path / "c.safetensors").exists()


def test_two_outputs_that_are_one_file_are_refused(files, tmp_path):
    report = tmp_path / "r"
    report.write_text("earlier")
    one_line(run("audit", files / "good.npz", "--json", report, "--markdown", report), 2,
             "--json and --markdown name the same file")
    one_line(run("audit", files / "good.npz", "--junit", report, "--json",
                 tmp_path / "." / "r"), 2, "name the same file")
    one_line(run("plan", files / "good.npz", "--json", report, "--plot", report), 2,
             "name the same file")
    assert report.read_text() == "earlier"  # refused before anything was touched


# ---- 2. temporaries ------------------------------------------------------------------


def _sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_only_this_targets_temporaries_of_dead_writers_are_removed(files, tmp_path):
    live = _sleeper()
    try:
        dead_pid = 999_999_999  # above any pid_max: no such process
        # another target's temporaries: a glob ".r[1].json.*.tmp" matches ".r1.json.*.tmp",
        # a prefix ".a.json." also starts the temporaries of "a.json.5"
        others = [tmp_path / f".r1.json.{live.pid}.abcd1234.tmp",
                  tmp_path / f".r1.json.{dead_pid}.abcd1234.tmp",
                  tmp_path / f".a.json.5.{live.pid}.abcd1234.tmp"]
        mine_live = tmp_path / f".r[1].json.{live.pid}.live0001.tmp"
        mine_dead = tmp_path / f".r[1].json.{dead_pid}.dead0001.tmp"
        dead_dir = tmp_path / f".a.json.{dead_pid}.dead0002.tmp"
        for p in [*others, mine_live, mine_dead]:
            p.write_text("x")
        dead_dir.mkdir()
        (dead_dir / ".tmpAbC123").write_text("partial")  # what safetensors put beside it
        for target in ("r[1].json", "a.json"):
            res = run("audit", files / "good.npz", "--json", tmp_path / target, "--min-r2", "0.5")
            assert res.exit_code == 0, res.output
        assert all(p.exists() for p in others) and mine_live.exists()
        assert not mine_dead.exists() and not dead_dir.exists()
    finally:
        live.kill()
        live.wait()


def _safetensors_like(path, age):
    path.write_bytes(b"\x02\0\0\0\0\0\0\0{}")
    os.utime(path, (time.time() - age, time.time() - age))


def test_abandoned_safetensors_temporaries_go_once_provably_unused(files, tmp_path):
    old = tmp_path / ".tmpAbC123"  # a killed save_file's leftover, two hours old
    fresh = tmp_path / ".tmpXyZ789"  # perhaps being written right now
    held = tmp_path / ".tmpQwE456"  # old, but a process still has it open
    not_ours = tmp_path / ".tmpNoT123"  # old, but not a safetensors file
    _safetensors_like(old, 7200)
    _safetensors_like(fresh, 0)
    _safetensors_like(held, 7200)
    not_ours.write_text("notes")
    os.utime(not_ours, (time.time() - 7200, time.time() - 7200))
    with open(held, "rb"):
        write_json(tmp_path / "r.json", {"a": 1})
    assert not old.exists() and fresh.exists() and held.exists() and not_ours.exists()


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_a_world_killed_inside_save_file_leaves_nothing_the_next_run_keeps(tmp_path):
    out = tmp_path / "p.safetensors"
    # SIGKILL at the moment safetensors renames its finished .tmpXXXXXX (a real kill of the
    # real command, at the worst time)
    res = subprocess.run(["strace", "-f", "-o", os.devnull, "-e", "trace=renameat,renameat2",
                          "-e", "inject=renameat,renameat2:signal=SIGKILL:when=1", *IDAUDIT,
                          "world", "spiral", "--pairs", "3000", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    if "Operation not permitted" in res.stderr or "ptrace" in res.stderr:
        pytest.skip(f"strace cannot trace here: {res.stderr.strip()[:200]}")
    assert res.returncode != 0 and not out.exists(), res.stderr
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".p.safetensors."), left  # one private dir
    assert [p.name[:4] for p in (tmp_path / left[0]).iterdir()] == [".tmp"]  # holding the partial
    assert run("world", "spiral", "--pairs", "50", "--out", out).exit_code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["p.safetensors"]


# ---- 3. concurrent writers of one report ---------------------------------------------------


def _hammer(barrier, base, rounds, errors):
    for i in range(rounds):
        path = base / f"d{i % 50}" / "r.json"  # 50 rounds racing to make its directory first
        barrier.wait()
        try:
            check_outputs([(path, "--json")], remove_stale=True)
            write_json(path, {"round": i})
        except Exception as exc:  # noqa: BLE001 - what the test counts
            errors.put(f"{type(exc).__name__}: {exc}")


def test_check_and_write_race_freely_in_six_processes(tmp_path):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    barrier, errors = ctx.Barrier(6), ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(barrier, tmp_path / "deep", 150, errors))
             for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == [] and all(p.exitcode == 0 for p in procs), found[:5]
    assert json.loads((tmp_path / "deep" / "d49" / "r.json").read_text())["round"] == 149
    assert {p.name for p in (tmp_path / "deep").iterdir()} == {f"d{i}" for i in range(50)}
    assert all([p.name for p in d.iterdir()] == ["r.json"] for d in (tmp_path / "deep").iterdir())


def test_six_audits_writing_one_report_at_once(files, tmp_path, forked_cli):
    # six processes of `idaudit audit` (forked from one that imported the CLI: the race is
    # between the processes' writes, not their start-up)
    for round_ in range(4):
        report = tmp_path / f"round{round_ % 2}" / "sub" / "r.json"  # fresh, then existing dirs
        cmd = ["audit", files / "good.npz", "--json", report, "--min-r2", "0.5"]
        results = forked_cli.run_at_once([cmd] * 6)
        assert [code for code, _ in results] == [0] * 6, [err for _, err in results]
        assert json.loads(report.read_text())["verdict"] == "pass"
        assert [p.name for p in report.parent.iterdir()] == ["r.json"]


# ---- 4. paths the write would refuse --------------------------------------------------


def test_a_name_too_long_deep_in_a_new_path_is_refused_before_the_work(files, tmp_path):
    long = "x" * 256
    for path in (tmp_path / "new" / "a" / f"{long}.json", tmp_path / "new" / long / "r.json"):
        one_line(run("audit", files / "good.npz", "--json", path, "--min-r2", "0.5"), 2,
                 "more than the file system allows")
    assert list(tmp_path.iterdir()) == []  # the directories the check made are gone
    deep = "/".join(["d"] * 2100) + "/r.json"  # over PATH_MAX
    one_line(run("audit", files / "good.npz", "--json", tmp_path / deep), 2, "bytes long")
    assert list(tmp_path.iterdir()) == []
    # the longest name the file system takes is written (the temporary is no longer)
    longest = tmp_path / "new" / ("y" * 250 + ".json")
    res = run("audit", files / "good.npz", "--json", longest, "--min-r2", "0.5")
    assert res.exit_code == 0, res.output
    assert json.loads(longest.read_text())["verdict"] == "pass"
    assert [p.name for p in longest.parent.iterdir()] == [longest.name]


def test_a_write_that_fails_midway_is_one_line_and_leaves_nothing(tmp_path):
    def to_dev_full(tmp):  # ENOSPC as a full disk gives it
        with open(tmp, "wb") as f, open("/dev/full", "wb") as full:
            f.write(b"partial")
            full.write(b"x" * 65536)
            full.flush()

    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    with pytest.raises(IdauditError, match="cannot write .*r.json \\(No space left on device\\)"):
        atomic_write(tmp_path / "r.json", to_dev_full)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def tmpfs(tmp_path):
    """Mount a tmpfs (root with mount rights only) and unmount it afterwards."""
    mounted = []

    def mount(options):
        where = tmp_path / f"mnt{len(mounted)}"
        where.mkdir()
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], capture_output=True)


def test_a_full_disk_is_one_line_before_the_work_or_after_it(files, tmpfs):
    disk = tmpfs("size=64k")
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f, pytest.raises(OSError, match="No space"):
        while True:
            f.write(b"\0" * 4096)
    one_line(run("audit", files / "good.npz", "--json", disk / "r.json"), 2,
             "No space left on device")
    one_line(run("audit", files / "good.npz", "--json", disk / "a" / "b" / "r.json"), 2,
             "No space left on device")
    one_line(run("world", "spiral", "--pairs", "100", "--out", disk / "p.safetensors"), 2,
             "No space left on device")
    assert [p.name for p in disk.iterdir()] == ["filler"]
    filler.unlink()
    # room for the check, not for 20 000 pairs (640 kB): the write itself fails, one line
    one_line(run("world", "spiral", "--pairs", "20000", "--out", disk / "p.safetensors"), 2,
             "cannot write")
    assert list(disk.iterdir()) == []


def test_a_read_only_place_is_refused_by_name(files, tmpfs):
    ro = tmpfs("ro,size=64k")
    for path in (ro / "r.json", ro / "sub" / "r.json"):
        one_line(run("audit", files / "good.npz", "--json", path), 2,
                 f"{ro} is not writable (Read-only file system)")
    one_line(run("sweep", "2d", "--out", ro / "sweep"), 2, "not writable")


# ---- 5. a killed sweep ------------------------------------------------------------------


def _children():
    """{pid: parent pid} of every process, from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = text.rsplit(")", 1)[1].split()
            if fields[0] != "Z":  # a zombie has ended
                table[int(entry)] = int(fields[1])
    return table


def _descendants(pid):
    table, found, todo = _children(), set(), [pid]
    while todo:
        parent = todo.pop()
        kids = [p for p, pp in table.items() if pp == parent]
        found.update(kids)
        todo += kids
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_sigterm_to_a_sweep_stops_its_workers(tmp_path):
    proc = subprocess.Popen([*IDAUDIT, "sweep", "2d", "--steps", "100000", "--seeds", "1",
                             "--workers", "2", "--out", str(tmp_path / "o")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    workers, family = set(), set()
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            workers = {p for p in _descendants(proc.pid)
                       if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")}
            if len(workers) >= 2:
                break
            time.sleep(0.2)
        assert len(workers) >= 2, proc.stderr.read() if proc.poll() is not None else "no workers"
        time.sleep(3)  # the workers are training now
        family = _descendants(proc.pid)  # the workers and multiprocessing's resource tracker
        assert workers <= family
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) in (128 + signal.SIGTERM, -signal.SIGTERM)
        deadline = time.time() + 20
        while time.time() < deadline and family & set(_children()):
            time.sleep(0.2)
        assert not family & set(_children()), "left running: " + ", ".join(
            Path(f"/proc/{p}/cmdline").read_text(errors="replace").replace("\0", " ")
            for p in family & set(_children()))
        assert "Traceback" not in proc.stderr.read()
    finally:  # whatever the outcome, nothing of this test is left running
        for pid in (workers | family | _descendants(proc.pid)) & set(_children()):
            try:
                if "multiprocessing" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                    os.kill(pid, signal.SIGKILL)  # ours: a pool worker or the resource tracker
            except OSError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _sigkill_leaves_no_worker(proc, find_workers) -> None:
    """SIGKILL ``proc`` once ``find_workers()`` has named its workers: all of them must end
    within 20 s (the kernel tells them; nothing runs in the killed process)."""
    workers = set()
    try:
        workers = find_workers()
        proc.kill()
        proc.wait()
        deadline = time.time() + 20
        while time.time() < deadline and workers & set(_children()):
            time.sleep(0.2)
        assert not workers & set(_children()), "left running"
    finally:
        for pid in workers & set(_children()):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_sigkill_to_a_sweep_ends_its_workers_too(tmp_path):
    proc = subprocess.Popen([*IDAUDIT, "sweep", "2d", "--steps", "100000", "--seeds", "1",
                             "--workers", "2", "--out", str(tmp_path / "o")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def training_workers():
        workers, deadline = set(), time.time() + 120
        while time.time() < deadline and len(workers) < 2 and proc.poll() is None:
            workers = {p for p in _descendants(proc.pid)
                       if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")}
            time.sleep(0.2)
        assert len(workers) == 2, "no workers"
        time.sleep(2)  # the workers are training now
        return workers

    _sigkill_leaves_no_worker(proc, training_workers)


@pytest.mark.skipif(__import__("importlib").util.find_spec("dm_control") is None
                    or not os.path.isdir("/proc/self/task"), reason="needs dm_control, /proc")
def test_sigkill_to_a_renderer_ends_its_render_workers(tmp_path):
    code = ("import os, time\n"
            "from idaudit.worlds.reacher.render import RenderPool\n"
            "with RenderPool(2) as pool:\n"
            "    print(' '.join(str(p.pid) for p in pool._processes), flush=True)\n"
            "    time.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")})

    def render_workers():
        workers = {int(p) for p in proc.stdout.readline().split()}
        assert len(workers) >= 1 and workers <= set(_children())
        return workers

    _sigkill_leaves_no_worker(proc, render_workers)


# ---- 6. no stale checkpoint graded as new ----------------------------------------------


def test_a_diverging_train_leaves_no_earlier_checkpoint_or_log(tmp_path):
    out = tmp_path / "c.safetensors"
    res = run("train", "--steps", "20", "--eval-every", "20", "--n-eval", "300", "--out", out,
              "--quiet")
    assert res.exit_code == 0, res.output
    assert out.exists() and (tmp_path / "c.log.json").exists()
    one_line(run("train", "--steps", "200", "--eval-every", "50", "--n-eval", "300", "--lr",
                 "1000", "--out", out, "--quiet"), 3, "training diverged")
    assert list(tmp_path.iterdir()) == []


def test_library_runs_remove_a_stale_checkpoint_before_training(tmp_path):
    from idaudit.training.runs import run as run_one

    out = tmp_path / "c.safetensors"
    out.write_text("an earlier model")
    (tmp_path / "c.log.json").write_text("{}")
    with pytest.raises(IdauditError, match="diverged"):
        run_one({"world": "spiral", "steps": 200, "eval_every": 50, "n_eval": 300, "lr": 1000.0},
                out)
    assert list(tmp_path.iterdir()) == []


def test_outputs_are_checked_up_front(tmp_path):
    # the helper every command uses, on its own: overlaps first, then writability
    a = tmp_path / "a.json"
    a.write_text("keep")
    with pytest.raises(IdauditError, match="is the same file as the input"):
        check_outputs([(tmp_path / "new.json", "--json"), (a, "--markdown")], [(a, "the input")],
                      remove_stale=True)
    assert a.read_text() == "keep" and not (tmp_path / "new.json").exists()
    check_outputs([(a, "--json"), (None, "--junit")], remove_stale=True)
    assert not a.exists()
    clean_stale_temporaries(tmp_path / "a.json")  # nothing to clean: no error
