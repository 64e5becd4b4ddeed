"""Errors the command line turns into one line and an exit code, and exceptions as one line."""


class UsageError(Exception):
    """Bad input from the user (options, files, names): one line, exit code 2."""


class ExtensionError(UsageError):
    """An extension could not be loaded or conflicts with another one: one line, exit code 2."""


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (just ``Type`` for an empty message): how records,
    logs and markers name an exception."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
