"""Errors the command line turns into one line and an exit code."""


class UsageError(Exception):
    """Bad input from the user (options, files, names): one line, exit code 2."""


class ExtensionError(UsageError):
    """An extension could not be loaded or conflicts with another one: one line, exit code 2."""
