"""The installed idaudit version (kept apart so any module can import it)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
