"""zlf extension ``task``: judge contest task packages (docs/taskpkg.md) with ``zlf task``."""
