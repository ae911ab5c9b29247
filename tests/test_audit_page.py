"""``idaudit audit --plot/--html`` and ``idaudit.audit(plot=, html=)``: the figures draw the
audit's own numbers (the held-out predictions score the report's R²), the page shows every
metric with the JSON's value and its catalogue meaning, and is self-contained. The page in a
real browser: tests/test_page_browser.py."""

import base64
import io
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest
from conftest import one_line, run
from scipy.stats import ortho_group

import idaudit
from idaudit.evaluations.figures import Drawn, audit_figure, sections
from idaudit.evaluations.inputs import AuditInputs, frame_sample
from idaudit.maths.catalogue import BY_KEY

pytest.importorskip("matplotlib")
PNG = b"\x89PNG\r\n\x1a\n"


class PageParser(HTMLParser):
    """What a page holds: its value cells (key → JSON value and the text shown), its images'
    sources, the verdict's text, and any tag that would reach the network or run code."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[tuple[str, object, str, str, int]] = []  # key, value, text, table, column
        self.images: list[str] = []
        self.verdict = ""
        self.foreign: list[str] = []
        self._open: list = []
        self._table = ""
        self._column = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "link", "iframe", "object", "embed"):
            self.foreign.append(tag)
        if tag == "img":
            self.images.append(a["src"])
        if tag == "table":
            self._table = a.get("class", "")
        if tag == "tr":
            self._column = 0
        if tag in ("td", "th"):
            self._column += 1
        if tag == "td" and "data-key" in a:
            self._open.append(["cell", a["data-key"], json.loads(a["data-value"]), ""])
        elif a.get("id") == "verdict":
            self._open.append(["verdict"])

    def handle_data(self, data):
        if self._open and self._open[-1][0] == "cell":
            self._open[-1][3] += data
        elif self._open and self._open[-1][0] == "verdict":
            self.verdict += data

    def handle_endtag(self, tag):
        if tag in ("td", "span") and self._open:
            item = self._open.pop()
            if item[0] == "cell":
                self.cells.append((*item[1:], self._table, self._column))


def parse_page(text):
    p = PageParser()
    p.feed(text)
    return p


def decode_png(src):
    """A data URI's image, decoded (PIL): its size."""
    from PIL import Image

    assert src.startswith("data:image/png;base64,"), src[:40]
    data = base64.b64decode(src.split(",", 1)[1], validate=True)
    assert data[:8] == PNG
    img = Image.open(io.BytesIO(data))
    img.load()
    return img.size


def assert_page_numbers_are_the_jsons(page, report_json):
    """Every value cell's JSON value is the report's (the gates' and the metric table's the
    report's metrics, the runs table's each run's), its text the console's rendering, and
    every metric of the report is on the page."""
    from idaudit.evaluations.page import _shown

    metrics = report_json["metrics"]
    for key, value, shown, table, column in page.cells:
        if table == "runs":  # metric, key, then one column per run
            assert value == report_json["runs"][column - 3]["metrics"][key], key
        else:
            assert value == metrics[key], key
        assert shown == _shown(value), key
    assert set(metrics) <= {key for key, _, _, table, _ in page.cells if table == "metrics"}


def arrays(n=3000, d=2, noise=0.05, seed=0, rho=0.9):
    """z, a rotation of it plus noise, and the OU partners' embedding."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, d))
    zp = rho * z + np.sqrt(1 - rho**2) * rng.standard_normal((n, d))
    q = ortho_group.rvs(d, random_state=seed + 3) if d > 1 else np.eye(1)
    return z, z @ q.T + noise * rng.standard_normal((n, d)), zp @ q.T, rho


def test_heldout_predictions_score_the_reports_r2():
    z, h, hp, rho = arrays(noise=0.3, d=3)
    rep = idaudit.audit(z, h, hp, rho, seed=4, test_fraction=0.3)
    d = Drawn(AuditInputs(z=z, h=h, h_prime=hp, rho=rho), rep, seed=4, test_fraction=0.3)
    train, test = d.split()
    assert train.size == 2100 and test.size == 900
    pred = d.predicted(test)
    r2 = 1 - ((z[test] - pred) ** 2).mean(0) / z[test].var(0)
    np.testing.assert_allclose(r2, rep.metrics["r2_h_to_z_heldout_per_dim"], rtol=1e-9)
    # an orthogonal encoder is predicted exactly
    exact = Drawn(AuditInputs(z=z, h=z @ ortho_group.rvs(3, random_state=1)), rep, seed=4)
    np.testing.assert_allclose(exact.predicted(exact.split()[1]), z[exact.split()[1]], atol=1e-9)


def test_the_sections_each_audit_supports():
    z, h, hp, rho = arrays()
    full = Drawn(AuditInputs(z=z, h=h, h_prime=hp, rho=rho), idaudit.audit(z, h, hp, rho))
    names = [s.name for s, _ in sections([full])]
    assert names == ["predictions", "embeddings", "bound"]
    wide = Drawn(AuditInputs(z=z[:, :1], h=h), idaudit.audit(z[:, :1], h))  # 1-D, no pairs
    assert [s.name for s, _ in sections([wide])] == ["predictions"]
    lf = Drawn(AuditInputs(z=None, h=h, h_prime=hp, rho=rho), idaudit.audit(None, h, hp, rho))
    assert [s.name for s, _ in sections([lf])] == ["label_free", "bound"]
    both = sections([full, wide])
    assert [len(got) for _, got in both] == [2, 1, 1]  # side by side where both have it
    flat = np.zeros_like(h)
    bad = Drawn(AuditInputs(z=z, h=flat), idaudit.audit(z, flat))
    assert bad.report.verdict == "inconclusive" and sections([bad]) == []
    assert audit_figure([bad]) is None


def test_frames_are_image_rows_with_their_decoded_latents():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (50, 8, 8, 3), dtype=np.uint8)
    frames, rows = frame_sample(x, np.arange(20, 50), k=4)
    assert rows.tolist() == [20, 30, 39, 49] and frames.shape == (4, 8, 8, 3)
    np.testing.assert_array_equal(frames, x[rows])
    assert frame_sample(x.astype(np.float32), None) == (None, None)  # not images
    z, h, _, _ = arrays(n=400)
    test = np.arange(200, 400)
    pics = rng.integers(0, 255, (400, 8, 8, 3), dtype=np.uint8)
    frames, rows = frame_sample(pics, test)
    inp = AuditInputs(z=z, h=h, test_rows=test, frames=frames, frame_rows=rows)
    d = Drawn(inp, idaudit.audit(z, h), seed=0)
    assert "frames" in [s.name for s, _ in sections([d])]
    assert d.split()[1].tolist() == test.tolist()  # the world's fixed rows
    fig = audit_figure([d])
    assert fig is not None
    # without fixed test rows (a Reacher set rendered for an encoder from elsewhere) the
    # frames come from every row: those among the fit's train rows are marked, not called
    # held out
    frames, rows = frame_sample(pics, None)
    d = Drawn(AuditInputs(z=z, h=h, frames=frames, frame_rows=rows), idaudit.audit(z, h), 0)
    held_out = np.isin(rows, d.split()[1])
    assert 0 < held_out.sum() < rows.size  # this seed's split puts frames on both sides
    from idaudit.evaluations.figures import _frames, new_figure

    fig, _ = new_figure(figsize=(8, 2))
    fig.clear()
    _frames(fig, d)
    assert fig._suptitle.get_text().endswith(f"frames {held_out.sum()} of {rows.size} held out)")
    titles = [ax.get_title() for ax in fig.axes]
    assert [t.endswith("(fit row)") for t in titles] == (~held_out).tolist()


def test_audit_writes_the_plot_and_a_self_contained_page(tmp_path):
    z, h, hp, rho = arrays()
    png, page = tmp_path / "a.png", tmp_path / "a.html"
    rep = idaudit.audit(z, h, hp, rho, min_r2=0.9, plot=png, html=page)
    assert rep.verdict == "pass"
    assert png.read_bytes()[:8] == PNG
    text = page.read_text()
    p = parse_page(text)
    assert p.verdict == "PASS" and p.foreign == []
    assert not re.search(r"(src|href)=\"(https?:)?//", text)  # nothing from the network
    assert len(p.images) == 3 and all(decode_png(s)[0] > 300 for s in p.images)
    assert_page_numbers_are_the_jsons(p, json.loads(json.dumps(rep.to_dict())))
    for key in ("r2_h_to_z_heldout", "bound", "whitening_error"):  # the catalogue's meaning
        assert BY_KEY[key].meaning.replace("&", "&amp;").replace("<", "&lt;").replace(
            ">", "&gt;").replace('"', "&quot;").replace("'", "&#x27;") in text


def test_cli_page_numbers_equal_the_json(tmp_path):
    z, h, hp, rho = arrays(d=3, noise=0.4)
    np.savez(tmp_path / "a.npz", z=z, h=h, h_prime=hp, rho=rho)
    res = run("audit", tmp_path / "a.npz", "--min-r2", "0.99", "--json", tmp_path / "a.json",
              "--html", tmp_path / "a.html", "--plot", tmp_path / "a.png")
    assert res.exit_code == 1, res.output  # the gate fails: the page says so
    report = json.loads((tmp_path / "a.json").read_text())
    p = parse_page((tmp_path / "a.html").read_text())
    assert p.verdict == "FAIL"
    assert_page_numbers_are_the_jsons(p, report)
    assert (tmp_path / "a.png").read_bytes()[:8] == PNG


def test_several_targets_side_by_side_and_label_free(tmp_path):
    paths = []
    for i, noise in enumerate((0.05, 0.5)):
        z, h, hp, rho = arrays(noise=noise, seed=i)
        paths.append(tmp_path / f"run{i}.npz")
        np.savez(paths[-1], z=z, h=h, h_prime=hp, rho=rho)
    rep = idaudit.audit(*paths, min_r2=0.5, html=tmp_path / "two.html")
    text = (tmp_path / "two.html").read_text()
    p = parse_page(text)
    assert p.verdict == "PASS" and '<table class="runs">' in text
    shown = {(k, json.dumps(v)) for k, v, *_ in p.cells}
    for run_ in rep.runs:  # each target's own numbers, beside the other's
        assert ("r2_h_to_z_heldout", json.dumps(run_["metrics"]["r2_h_to_z_heldout"])) in shown
    widths = [decode_png(s)[0] for s in p.images]
    # two targets' panels one above the other, each at its own size: 8.4 in at 120 dpi, within
    # the page's 1400-px column (side by side they were 2016 px, shown shrunk)
    assert widths[0] == 1008
    lf = tmp_path / "lf.html"
    rep = idaudit.audit(paths[0], label_free=True, html=lf)
    p = parse_page(lf.read_text())
    assert p.verdict == "NO GATE" and len(p.images) == 2  # label-free signals, the bound
    assert_page_numbers_are_the_jsons(p, json.loads(json.dumps(rep.to_dict())))


def test_outputs_are_checked_before_the_audit(tmp_path, monkeypatch):
    import sys

    z, h, _, _ = arrays()
    np.savez(tmp_path / "a.npz", z=z, h=h)
    one_line(run("audit", tmp_path / "a.npz", "--json", tmp_path / "x", "--html",
                 tmp_path / "x"), 2, "name the same file")
    one_line(run("audit", tmp_path / "a.npz", "--plot", tmp_path / "a.npz"), 2,
             "an output never replaces an input")
    (tmp_path / "dir").mkdir()
    one_line(run("audit", tmp_path / "a.npz", "--html", tmp_path / "dir"), 2, "--html")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra were missing
    one_line(run("audit", tmp_path / "a.npz", "--plot", tmp_path / "p.png"), 2,
             'pip install "idaudit[plot]"')
    with pytest.raises(ValueError, match=r'^html needs matplotlib: pip install "idaudit\[plot\]"'):
        idaudit.audit(z, h, html=tmp_path / "p.html")
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "p.html").exists()


def test_an_inconclusive_audit_still_says_why(tmp_path):
    """A collapsed embedding: no figure to draw, so the PNG and the page carry the verdict and
    its reason."""
    from PIL import Image

    z, _, _, _ = arrays()
    rep = idaudit.audit(z, np.zeros_like(z), min_r2=0.5, plot=tmp_path / "a.png",
                        html=tmp_path / "a.html")
    assert rep.verdict == "inconclusive"
    text = (tmp_path / "a.html").read_text()
    p = parse_page(text)
    assert p.verdict == "INCONCLUSIVE" and p.images == []
    assert f'id="reason">{rep.reason}<' in text
    assert Image.open(tmp_path / "a.png").size[0] > 300


def test_many_targets_wrap_and_the_page_says_which_are_drawn(tmp_path):
    """Targets wrap (a 4-latent target's predictions, 14 in, are wider than the page's
    column, so one to a row), so a figure's width does not grow with their number; past
    MAX_DRAWN the page says how many the figures leave to the tables."""
    from idaudit.evaluations.figures import MAX_DRAWN, ROW_INCHES, section_figure

    reps = []
    for i in range(MAX_DRAWN + 2):
        z, h, _, _ = arrays(n=300, d=4, seed=i)
        reps.append(Drawn(AuditInputs(z=z, h=h), idaudit.audit(z, h), 0))
    (pred, drawn), = [(s, got) for s, got in sections(reps) if s.name == "predictions"]
    assert len(drawn) == MAX_DRAWN
    one = section_figure(pred, drawn[:1]).get_size_inches()
    many = section_figure(pred, drawn).get_size_inches()
    assert one[0] == pytest.approx(14.0) and one[0] > ROW_INCHES
    assert many[0] == pytest.approx(one[0])
    assert many[1] == pytest.approx(MAX_DRAWN * one[1])
    paths = []
    for i in range(MAX_DRAWN + 1):
        z, h, _, _ = arrays(n=300, seed=i)
        paths.append(tmp_path / f"r{i}.npz")
        np.savez(paths[-1], z=z, h=h)
    idaudit.audit(targets=paths, html=tmp_path / "many.html")
    text = (tmp_path / "many.html").read_text()
    assert f"The figures show the first {MAX_DRAWN} of {MAX_DRAWN + 1} targets" in text
    assert text.count("<th class=\"value\">") >= MAX_DRAWN + 1  # every target in the table
