"""The file format ``rows``: a text file, ``#idaudit-rows Z H`` then one row of Z + H numbers
per line."""

from pathlib import Path

import numpy as np

from idaudit.core.errors import UsageError
from idaudit.core.registered import FileFormat

MAGIC = b"#idaudit-rows "


def sniff(path: Path, head: bytes) -> bool:
    return head.startswith(MAGIC)


def read(path: Path, embedding: bool) -> dict[str, np.ndarray]:
    lines = path.read_text().splitlines()
    try:
        nz, nh = (int(v) for v in lines[0][len(MAGIC):].split())
        table = np.array([[float(v) for v in line.split()] for line in lines[1:]])
    except ValueError as exc:
        raise UsageError(f"{path}: not a rows file ({exc})") from None
    if table.ndim != 2 or table.shape[1] != nz + nh or len(table) < 2:
        raise UsageError(f"{path}: expected rows of {nz + nh} numbers")
    return {"z": table[:, :nz], "h": table[:, nz:]}


def example(path: Path) -> None:
    rng = np.random.default_rng(0)
    z = rng.standard_normal((300, 2))
    h = z @ np.array([[0.6, -0.8], [0.8, 0.6]]) + 0.05 * rng.standard_normal((300, 2))
    body = "\n".join(" ".join(f"{v:.6f}" for v in row) for row in np.hstack([z, h]))
    path.write_text(f"#idaudit-rows 2 2\n{body}\n")


ROWS = FileFormat("a text table of z and h, one row per line", sniff, read,
                  ("text parsed as numbers, nothing else", "nothing: there is no code"),
                  example)
