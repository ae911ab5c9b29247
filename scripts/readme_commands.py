"""Print the README's set-up commands, one per line, exactly as the README writes them.

They are the fenced ``bash`` blocks of the README's "## Set-up" section, each a single
command; ``.ci/run`` compares its own two commands with what this prints and stops if they
differ, so CI and the README cannot drift apart. Exit 1 if the section is missing or a block
is not one line.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def setup_commands(text: str) -> list[str]:
    section = re.search(r"^## Set-up.*?$(.*?)(?=^## |\Z)", text, re.M | re.S)
    if section is None:
        raise ValueError("README.md has no '## Set-up' section")
    blocks = re.findall(r"^```bash\n(.*?)^```", section.group(1), re.M | re.S)
    commands = []
    for block in blocks:
        lines = [ln for ln in block.splitlines() if ln.strip()]
        if len(lines) != 1:
            raise ValueError(f"a set-up block must be one command, got {len(lines)} lines")
        commands.append(lines[0].strip())
    return commands


def main() -> int:
    try:
        commands = setup_commands(README.read_text())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(commands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
