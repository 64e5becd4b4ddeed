"""zlf extension ``task``: judge contest task packages (FORMATS.md §6) with ``zlf task``."""
