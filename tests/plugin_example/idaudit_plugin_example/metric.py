"""The metric group ``maxcorr``: the mean over latents of the largest |correlation| with any
coordinate of h, from the audit's covariance."""

import numpy as np

from idaudit.maths.catalogue import Metric
from idaudit.maths.metrics import Fit, MetricGroup


def max_corr(fit: Fit) -> dict[str, float]:
    s = fit.s
    cross = s[fit.iz, fit.ih]
    scale = np.sqrt(np.outer(np.diag(s)[fit.iz], np.diag(s)[fit.ih]))
    return {"mean_max_abs_corr": float(np.abs(cross / scale).max(axis=1).mean())}


MAXCORR = MetricGroup("maxcorr", lambda fit: True, max_corr, metrics=(
    Metric("mean_max_abs_corr", "mean max |corr(z_i, h_j)|", "higher", frozenset({"z"}),
           frozenset({"audit"}), "for each latent its largest |correlation| with a coordinate "
           "of h, averaged"),))
