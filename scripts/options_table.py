"""docs/options.md from the option declarations (idaudit.core.options and
idaudit.core.command_options), or a check that it is.

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

HEAD = """# Options

Every option below is declared once, in `src/idaudit/core/options.py` (name, type, flags,
help, default, constraint): each command takes its flags from there (`idaudit train` and
`idaudit world` the world options, the commands that embed an encoder — `audit`,
`consistency`, `plan`, `embed` — the encoder options, and each command its own),
`idaudit.train(...)` and `TrainRequest` their fields, each other request its own options'
defaults, and this table is written from the same declarations by `scripts/options_table.py`
(tests/test_options.py checks it is current and tries each constraint on the command line).
A constraint is checked in one place with one wording: an interval (`core/limits.py`) or a
set of values (a registry's names take plugins' too). The default of a world, train or
encoder option is the global one (`core/defaults.py`); a world's own default and a recipe's
come before it (`idaudit train … --show-config` prints each value and where it came from).
A command's own option defaults as declared ("—": the command chooses, as its help says).
The flags that only choose what is printed or where a report goes (`--json`, `--junit`,
`--markdown`, `--keys`, `--min`, `--max`, `--gate`, train's `--out`, `--quiet`,
`--show-config`, plan's `--json` and `--plot`, sweep's `--list`) are in each command's
`--help`.

"""


def constraint(option) -> str:
    """The declared constraints in words: what a value must be (``valid``), its form
    (``pattern``), an interval or the values it may take, and the option it goes with."""
    from idaudit.core.options import VALID

    said = [VALID[option.valid][1].removeprefix("must be ")] if option.valid else []
    said += [option.pattern.says] if option.pattern is not None else []
    if option.limit is not None:
        from idaudit.core.limits import LIMITS

        lim = LIMITS[option.limit]
        low = "(" if lim.open else "["
        high = ")" if lim.open or lim.high is None else "]"
        said.append(f"{low}{lim.low:g}, {'∞' if lim.high is None else f'{lim.high:g}'}{high}"
                    + (" integer" if lim.integer else ""))
    if isinstance(option.choices, str):
        from idaudit.core import registered

        said.append("one of " + ", ".join(getattr(registered, option.choices.upper()).builtin()))
    elif option.choices:
        said.append("one of " + ", ".join(option.choices))
    if option.requires is not None:
        said.append(f"only with --{option.requires[0].replace('_', '-')}")
    return "; ".join(said)


def default(option, chained: bool) -> str:
    """The default: a command's own option's as declared (``chained`` False), else the global
    one (core/defaults.py) a run falls back on after the world's own and a recipe's; "—"
    where there is none (the world or the command decides, or the option stays unset)."""
    from idaudit.core.defaults import TRAIN_DEFAULTS, WORLD_DEFAULTS, default_text

    if not chained:
        if option.default is ...:
            return "required"
        if option.default is not None and option.default is not False and option.default != ():
            return f"`{default_text(option.default)}`"
        return "—"
    for table in (TRAIN_DEFAULTS, WORLD_DEFAULTS):
        if option.name in table and table[option.name] is not None:
            return f"`{default_text(table[option.name])}`"
    return "—"


def table() -> str:
    from idaudit.core.command_options import CHAINED, GROUPS

    out = [HEAD]
    for title, (commands, options) in GROUPS.items():
        names = ", ".join(f"`{c}`" for c in commands)
        out += [f"## {title} ({names})\n\n", "| flags | type | default | constraint | help |\n",
                "|---|---|---|---|---|\n"]
        for o in options:
            text = o.help_text().replace("|", "\\|")
            flags = ", ".join(f"`{f}`" for f in o.flags)
            out.append(f"| {flags} | {o.kind} | {default(o, title in CHAINED)} | "
                       f"{constraint(o)} | {text} |\n")
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
