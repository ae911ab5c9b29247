"""idaudit: did your self-supervised encoder learn the world (its latents up to a rotation)?"""

__version__ = "0.1.0"


def audit(*args, **kwargs):
    """Audit arrays or an encoder; see :func:`idaudit.audit.audit` (imported lazily)."""
    from .audit import audit as _audit

    return _audit(*args, **kwargs)
