"""docs/options.md from the option declarations (idaudit.core.options), or a check that it is.

    python scripts/options_table.py            # write docs/options.md
    python scripts/options_table.py --check    # exit 1 if docs/options.md differs

Each row: the flags, the type, the global default (core/defaults.py; a world's own and a
recipe's come first), the constraint (an interval of core.limits.LIMITS, or the
values a string may take: idaudit's own, without plugins) and the help, as --help shows it.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "options.md"

HEAD = """# World and train options

Every option below is declared once, in `src/idaudit/core/options.py` (name, type, flags,
help, constraint); `idaudit train` and `idaudit world`, and the commands that embed an
encoder (`audit`, `consistency`, `plan`, `embed`), take their flags from there,
`idaudit.train(...)` and `TrainRequest` their fields, and this table is written from the
same declarations by `scripts/options_table.py` (tests/test_options.py checks it is current).
A constraint is checked in one place with one wording: an interval (`core/limits.py`) or a
set of values (a registry's names take plugins' too). The default is the global one
(`core/defaults.py`); a world's own default and a recipe's come before it
(`idaudit train … --show-config` prints each value and where it came from).

"""


def constraint(option) -> str:
    if option.limit is not None:
        from idaudit.core.limits import LIMITS

        lim = LIMITS[option.limit]
        low = "(" if lim.open else "["
        high = ")" if lim.open or lim.high is None else "]"
        return f"{low}{lim.low:g}, {'∞' if lim.high is None else f'{lim.high:g}'}{high}" + \
            (" integer" if lim.integer else "")
    if isinstance(option.choices, str):
        from idaudit.core import registered

        return "one of " + ", ".join(getattr(registered, option.choices.upper()).builtin())
    if option.choices:
        return "one of " + ", ".join(option.choices)
    return ""


def default(option) -> str:
    """The global default (core/defaults.py) a run falls back on after the world's own and a
    recipe's; "—" where there is none (the world decides, or the option stays unset)."""
    from idaudit.core.defaults import TRAIN_DEFAULTS, WORLD_DEFAULTS, default_text

    for table in (TRAIN_DEFAULTS, WORLD_DEFAULTS):
        if option.name in table and table[option.name] is not None:
            return f"`{default_text(table[option.name])}`"
    return "—"


def table() -> str:
    from idaudit.core.options import ENCODER, TRAIN, WORLD

    out = [HEAD]
    for title, options in (("World options (`train`, `world`)", WORLD),
                           ("Train options (`train`)", TRAIN),
                           ("Encoder options (`audit`, `consistency`, `plan`, `embed`)",
                            ENCODER)):
        out += [f"## {title}\n\n", "| flags | type | default | constraint | help |\n",
                "|---|---|---|---|---|\n"]
        for o in options:
            text = o.help_text().replace("|", "\\|")
            flags = ", ".join(f"`{f}`" for f in o.flags)
            out.append(f"| {flags} | {o.kind} | {default(o)} | {constraint(o)} | {text} |\n")
        out.append("\n")
    return "".join(out).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    text = table()
    if argv == ["--check"]:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC} is not what the declarations give: run python scripts/options_table.py",
                  file=sys.stderr)
            return 1
        return 0
    if argv:
        print("usage: python scripts/options_table.py [--check]", file=sys.stderr)
        return 2
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
