"""Print the system-call numbers of the cage's allow list for x86_64 and aarch64, read off
the kernel's UAPI headers (Debian's linux-libc-dev), as the Python literal that
``src/idaudit/loading/syscalls.py`` holds.

    python scripts/syscall_numbers.py > /tmp/numbers.py   # then paste NUMBERS

x86_64 has its own table (asm/unistd_64.h); aarch64 uses the generic one (asm-generic/
unistd.h), where the 64-bit names of a few calls (newfstatat, mmap, fcntl, lseek …) are
``__NR3264_*`` entries. A name an architecture lacks (open, stat, fork … on aarch64) is left
out of its table.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

HEADERS = {"x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
           "aarch64": "/usr/include/asm-generic/unistd.h"}
#: aarch64's __NR3264_ entries under the names a 64-bit kernel gives them
NAMES_3264 = {"fstatat": "newfstatat", "fadvise64": "fadvise64"}
#: calls newer than Debian 12's headers (Linux 6.1), one number on both architectures:
#: map_shadow_stack (6.6), mseal (6.10)
NEWER = {"map_shadow_stack": 453, "mseal": 462}


def numbers(header: str) -> dict[str, int]:
    text = Path(header).read_text()
    found = {m.group(1): int(m.group(2))
             for m in re.finditer(r"#define __NR_(\w+)\s+(\d+)\b", text)}
    for m in re.finditer(r"#define __NR3264_(\w+)\s+(\d+)\b", text):
        found.setdefault(NAMES_3264.get(m.group(1), m.group(1)), int(m.group(2)))
    return {**NEWER, **found}


def main() -> None:
    from idaudit.loading.syscalls import NAMED

    out = {}
    for arch, header in HEADERS.items():
        table = numbers(header)
        out[arch] = {name: table[name] for name in sorted(NAMED) if name in table}
    print("NUMBERS: dict[str, dict[str, int]] = {")
    for arch, table in out.items():
        items = [f'"{k}": {v}' for k, v in table.items()]
        lines, line = [], "        "
        for item in items:
            if len(line) + len(item) + 2 > 96:
                lines.append(line.rstrip())
                line = "        "
            line += item + ", "
        lines.append(line.rstrip())
        print(f'    "{arch}": {{\n' + "\n".join(lines) + "\n    },")
    print("}")


if __name__ == "__main__":
    main()
