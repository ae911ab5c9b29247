"""Never silent: plain progress lines off a terminal (each tenth, or 30 s) with an ETA, the
same lines as `idaudit` log records, and `progress=` in the Python API's train."""

import io
import logging

from idaudit.core.progress import PLAIN_EVERY_S, ProgressBar


def test_plain_lines_at_every_tenth_with_an_eta():
    stream = io.StringIO()
    with ProgressBar(True, 1000, "train", plain=True, stream=stream,
                     every_s=float("inf")) as bar:
        for _ in range(1000):
            bar.advance(1)
    lines = stream.getvalue().splitlines()
    assert [int(ln.split()[1].split("/")[0]) for ln in lines] == list(range(100, 1001, 100))
    assert all(ln.startswith("train: ") and "/1000 (" in ln and "ETA" in ln for ln in lines)
    assert lines[4].split()[2] == "(50"
    assert PLAIN_EVERY_S == 30.0


def test_a_disabled_bar_still_logs_its_lines(caplog):
    caplog.set_level(logging.INFO, logger="idaudit")
    stream = io.StringIO()
    with ProgressBar(False, 50, "sweep", stream=stream, every_s=float("inf")) as bar:
        for _ in range(50):
            bar.advance(1, "x ok")
    assert stream.getvalue() == ""
    msgs = [r.getMessage() for r in caplog.records if r.name == "idaudit.progress"]
    assert len(msgs) == 10 and msgs[-1].startswith("sweep: 50/50 (100 %)")
    assert all("ETA" in m and m.endswith("— x ok") for m in msgs)


def test_python_train_with_progress_writes_lines_and_log_records(caplog, capsys):
    import idaudit

    caplog.set_level(logging.INFO, logger="idaudit")
    rec = idaudit.train(world="spiral", steps=100, n_eval=1000, eval_every=0, progress=True)
    assert rec.collapsed is False
    msgs = [r.getMessage() for r in caplog.records if r.name == "idaudit.progress"]
    steps = {int(m.split()[1].split("/")[0]) for m in msgs if m.startswith("train: ")}
    assert set(range(10, 101, 10)) <= steps  # each tenth (a 30-s line may come between)
    err = capsys.readouterr().err  # captured: not a terminal, so plain lines
    assert sum(ln.startswith("train: ") and "ETA" in ln for ln in err.splitlines()) >= 10
    encoder_lines = [r.getMessage() for r in caplog.records if r.name == "idaudit.training"]
    assert any(m.startswith("encoder: mlp") for m in encoder_lines)
