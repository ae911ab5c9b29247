"""The audit's page in a real browser: headless Chromium (Debian's ``chromium`` package; .ci/run
installs it with apt where it is missing) opens the page ``idaudit audit --html`` wrote, its
DOM shows the verdict and the JSON's numbers, every figure decodes, and its screenshot shows
the verdict's badge. Skipped, saying so, only where chromium is missing and apt cannot run."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from conftest import run
from test_audit_page import arrays, assert_page_numbers_are_the_jsons, decode_png, parse_page

pytest.importorskip("matplotlib")
NAMES = ("chromium", "chromium-browser", "google-chrome")
WINDOW = (1280, 1600)


def chromium() -> str:
    """The browser's path; a failure where apt could install it, a skip where it cannot."""
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    if os.geteuid() == 0 and shutil.which("apt-get"):
        pytest.fail("chromium is missing but apt can install it: apt-get update && apt-get "
                    "install -y chromium (as .ci/run does)")
    pytest.skip("chromium is missing and apt cannot run here (not root, or no apt-get): the "
                "page was not opened in a browser")


def browse(page, tmp_path, *args) -> subprocess.CompletedProcess:
    """Headless chromium on ``page`` with ``args`` (its own profile, no sandbox: CI is root)."""
    return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
                           *args, page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=180, check=True)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A failing and a passing audit's page and JSON, written by the CLI."""
    d = tmp_path_factory.mktemp("page")
    z, h, hp, rho = arrays(d=2, noise=0.2)
    np.savez(d / "a.npz", z=z, h=h, h_prime=hp, rho=rho)
    out = {}
    for name, gate, code in (("fail", "0.999", 1), ("pass", "0.9", 0)):
        res = run("audit", d / "a.npz", "--min-r2", gate, "--json", d / f"{name}.json",
                  "--html", d / f"{name}.html")
        assert res.exit_code == code, res.output
        out[name] = (d / f"{name}.html", json.loads((d / f"{name}.json").read_text()))
    return out


@pytest.mark.parametrize("verdict", ["fail", "pass"])
def test_chromium_shows_the_verdict_the_numbers_and_every_figure(page, verdict, tmp_path):
    html, report = page[verdict]
    dom = browse(html, tmp_path, "--dump-dom").stdout
    p = parse_page(dom)  # the DOM as the browser built it
    assert p.verdict == verdict.upper() == report["verdict"].upper()
    assert_page_numbers_are_the_jsons(p, report)
    assert len(p.images) == 3
    for src in p.images:
        w, h = decode_png(src)
        assert w > 300 and h > 100


def test_chromium_screenshot_shows_the_verdict_badge(page, tmp_path):
    from PIL import Image

    colours = {"pass": (0x1a, 0x7f, 0x37), "fail": (0xcf, 0x22, 0x2e)}
    for verdict, colour in colours.items():
        shot = tmp_path / f"{verdict}.png"
        browse(page[verdict][0], tmp_path, f"--screenshot={shot}",
               f"--window-size={WINDOW[0]},{WINDOW[1]}")
        img = np.asarray(Image.open(shot).convert("RGB"))
        assert img.shape[:2] == (WINDOW[1], WINDOW[0])
        top = img[:120].reshape(-1, 3).astype(int)
        badge = np.all(np.abs(top - colour) <= 6, axis=1).sum()
        other = colours["fail" if verdict == "pass" else "pass"]
        assert badge > 300, verdict  # the badge is drawn in its verdict's colour
        assert np.all(np.abs(top - other) <= 6, axis=1).sum() == 0
        rest = img[120:].reshape(-1, 3)
        assert float(rest.std()) > 20  # figures and tables below it, not a blank page
