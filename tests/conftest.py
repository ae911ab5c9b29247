import os

import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))


def assert_contract(train_metrics, audit_metrics):
    """Every key train logs is one audit reports, with the same value (final_loss aside);
    returns the shared keys."""
    import pytest

    assert set(train_metrics) - set(audit_metrics) <= {"final_loss", "rho_0", "rho_1"}
    shared = [k for k, v in train_metrics.items() if k in audit_metrics and v is not None]
    for key in shared:
        a, b = train_metrics[key], audit_metrics[key]
        if isinstance(a, float):
            assert b == pytest.approx(a, rel=1e-12, abs=1e-14), key
        else:
            assert a == b, key
    return shared
