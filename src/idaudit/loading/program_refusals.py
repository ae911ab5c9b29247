"""What the vetting of programs from files shares (torch.export archives,
:mod:`idaudit.loading.export_archive`; TorchScript, :mod:`idaudit.loading.torchscript`): why a
program is refused untrusted (:class:`Unvetted`) or cannot be read (:class:`Unreadable`), the
aten operators that reach files, which neither may call, and the hint that ends a refusal."""

from __future__ import annotations

__all__ = ["SIDE_EFFECT_OPS", "TRUST_HINT", "Unreadable", "Unvetted", "short"]

TRUST_HINT = "pass --trust-code only if you trust the file"

#: aten operators that reach files: from_file maps one (shared=True writes through to it),
#: save writes one. A program (.pt2 or TorchScript) that calls one is refused untrusted.
SIDE_EFFECT_OPS = frozenset({"from_file", "save"})


class Unvetted(Exception):
    """Why idaudit will not hand a program to torch's loader untrusted."""

    def __init__(self, reason: str, pickled: bool = False) -> None:
        super().__init__(reason)
        self.pickled = pickled


class Unreadable(Exception):
    """The file cannot be read as the program it claims to be (torch would fail on it too)."""


def short(s: str) -> str:
    """``s`` quoted and cut to 60 characters, as a refusal names what it found."""
    return repr(s if len(s) <= 60 else s[:57] + "...")
