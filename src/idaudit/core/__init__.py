"""Foundations every layer reads: errors and exit codes, the defaults and limits of options, one
request per command, the name → object registry, file I/O, JSON text, the progress bar, the
version. Imports nothing of idaudit outside this folder.
"""
