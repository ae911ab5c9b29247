"""One line for CI's log: the torch (and triton, torchvision) this Python runs, and Python's."""

import importlib.metadata as md
import sys

import torch


def version(name: str) -> str:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "none"


print(f"::: torch {torch.__version__} (CUDA build: {torch.version.cuda or 'no'}), "
      f"triton {version('triton')}, torchvision {version('torchvision')}, "
      f"Python {sys.version.split()[0]}")
