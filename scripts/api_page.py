"""Write docs/api.md, the API reference page MkDocs builds (mkdocstrings renders each entry
from its docstring), from the one table of public names, ``_PUBLIC`` in
src/idaudit/__init__.py — the same table ``idaudit.__all__`` and ``__init__.pyi`` come from.

    python scripts/api_page.py           # (re)write docs/api.md
    python scripts/api_page.py --check   # exit 1 if docs/api.md differs from the table's

Each name is documented where it is defined (``idaudit.train`` is
``idaudit.training.runs.train_encoder``) under the heading of its public name.
tests/test_packaging.py runs the check.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from public_stub import INIT, ROOT, public_table  # noqa: E402

PAGE = ROOT / "docs" / "api.md"

HEADER = """# API reference

<!-- Generated from _PUBLIC in src/idaudit/__init__.py by scripts/api_page.py: do not edit;
rerun it after changing the table (tests/test_packaging.py checks that it is current). -->

The public names of `import idaudit` (`idaudit.__all__`), each documented from its
docstring where it is defined. `import idaudit` alone loads none of them; each loads on first
use. `idaudit.__version__` is the installed version. The command line is described by
`idaudit --help` and [the options page](options.md).
"""

SECTIONS = [  # (title, which names), in this order; a name no section takes goes in the last
    ("Actions", lambda n, w: n in {"audit", "consistency", "plan", "embed", "train", "write_world"}),
    ("Requests", lambda n, w: n.endswith("Request")),
    ("Results", lambda n, w: n.endswith("Report") or n == "RunRecord"),
    ("Errors", lambda n, w: w.startswith("core.errors")),
    ("Worlds and pairs", lambda n, w: w.startswith("worlds")),
    ("Losses, for a training loop of your own", lambda n, w: w.startswith("maths.losses")),
    ("Other", lambda n, w: True),
]


def page(table: dict[str, str]) -> str:
    names = [n for n in table if n != "__version__"]
    out = [HEADER]
    for title, takes in SECTIONS:
        chosen = [n for n in names if takes(n, table[n])]
        names = [n for n in names if n not in chosen]
        if not chosen:
            continue
        out.append(f"\n## {title}\n")
        for name in chosen:
            module, _, attr = table[name].partition(":")
            out.append(f"\n::: idaudit.{module}.{attr or name}\n"
                       f"    options:\n      heading: \"idaudit.{name}\"\n")
    return "".join(out)


def main(argv: list[str]) -> int:
    text = page(public_table(INIT.read_text()))
    if "--check" in argv:
        if PAGE.read_text() != text:
            print(f"{PAGE} is not the table's: run python scripts/api_page.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
