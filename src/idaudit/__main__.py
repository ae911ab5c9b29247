"""``python -m idaudit``: the same as the ``idaudit`` command."""

from ._entry import main

main()
