"""``python -m idaudit.cli``: the same as the ``idaudit`` command."""

from idaudit.cli import main

main()
