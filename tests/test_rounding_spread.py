"""The simulation behind the tolerances of trained numbers (tests/rounding.py) and its record,
docs/data/rounding-spread.json: made from the code the docs hold now, its tolerances the rule's,
the docs' numbers inside them, and the tests' thresholds many σ away from what they bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
import rounding
import torch


def test_the_noise_is_one_rounding_per_layer_and_follows_its_seed():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))
    x = torch.randn(256, 8)
    clean = net(x)
    noisy = []
    for seed in (1, 1, 2):
        with rounding.rounding_noise(seed):
            noisy.append(net(x))
    assert torch.equal(noisy[0], noisy[1]) and not torch.equal(noisy[0], noisy[2])
    assert torch.equal(net(x), clean)  # gone after the block
    rel = ((noisy[0] - clean).abs() / clean.abs().clamp_min(1e-3)).max().item()
    # three modules (a Linear, the GELU, the Linear), each 2⁻²³ at most, carried through
    assert 1e-8 < rel < 1e-4
    with rounding.rounding_noise(3, relative=0.5):  # the size is the one asked for
        y = torch.nn.Identity()(torch.ones(10_000))
    assert 0.49 < (y - 1).abs().max().item() <= 0.5


@pytest.mark.parametrize("name", list(rounding.EXAMPLES))
def test_each_record_is_of_the_doc_s_code_and_holds_the_doc_s_numbers(name):
    example, rec = rounding.EXAMPLES[name], rounding.record()[name]
    assert rec["code_sha256"] == example.sha256(), f"rerun: python tests/rounding.py {name}"
    assert rec["runs"] >= 8 and len(rec["perturbed"]) == rec["runs"]
    assert rec["sigma"] == rounding.spread(rec["perturbed"])
    tolerance = rounding.tolerances(rec["perturbed"], example.shown(), example.code())
    shape, shown = rounding.template(example.shown())
    assert rounding.template(rec["printed_as_written"])[0] == shape
    runs = np.asarray(rec["perturbed"])
    for i, (want, tol) in enumerate(zip(shown, tolerance)):
        if tol == 0:  # the code writes it: every run printed the doc's number
            assert (runs[:, i] == want).all(), i
        else:  # the doc's (another machine's) number, inside this machine's simulated spread
            assert abs(want - float(np.median(runs[:, i]))) <= tol, (i, want, runs[:, i])
            assert abs(want - rec["as_written"][i]) <= tol, (i, want, rec["as_written"][i])


@pytest.mark.parametrize("name", list(rounding.MARGINS))
def test_the_thresholds_tests_hold_trained_numbers_to_are_far_from_them(name):
    """Each threshold a test holds a short training's number to lies more than 4·√2·σ away
    from the number, σ being its simulated spread, and no perturbed run crossed it."""
    rec = rounding.record()[name]
    assert rec["runs"] >= 8
    assert set(rec["numbers"]) == set(rounding.MARGINS[name].bounds)
    for key, num in rec["numbers"].items():
        bounds = tuple(num["bounds"])
        assert num["margin_in_sigmas"] == pytest.approx(
            rounding.margin_in_sigmas(num["as_written"], num["sigma"], bounds))
        assert num["margin_in_sigmas"] > rounding.SIGMAS, (key, num)
        assert all(rounding.margin_in_sigmas(v, 1.0, bounds) > 0 for v in num["perturbed"]), key


def test_the_rule_for_a_tolerance():
    runs = [[0.8, 1.0, 0.5], [0.8, 1.2, 0.5], [0.8, 1.1, 0.5]]
    assert rounding.tolerances(runs, "0.8 1.000 0.500", "min_r2=0.8") == [
        0.0, pytest.approx(4 * math.sqrt(2) * 0.1), 0.001]  # a gate; 4√2σ; a printed digit
