"""``python -m idaudit``: the same as the ``idaudit`` command."""

from idaudit._entry import main

main()
