"""An example plugin package for idaudit: one world, one objective, one metric group and one
file format, each added through an entry point (tests/test_plugins.py builds it into a wheel,
installs it and uses it with no edit inside idaudit)."""
