"""zlf: A/B performance comparison of GPU kernels across compiler changes.

Extensions implement hooks with ``@zlf.hookimpl``; see :mod:`zlf.hookspecs` for the API.
"""
import pluggy

from .errors import ExtensionError, UsageError
from .hookspecs import NAME

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker(NAME)

# Imported late so that extensions can ``from zlf import hookimpl`` from anywhere.
from .ops import Op  # noqa: E402
from .records import CompileEvent, LaunchEvent, Point, PointRecord, Timing  # noqa: E402
from .backends import Backend  # noqa: E402
from .options import CommandTraits  # noqa: E402

__all__ = [
    "hookimpl",
    "Op",
    "Point",
    "PointRecord",
    "Timing",
    "CompileEvent",
    "LaunchEvent",
    "Backend",
    "CommandTraits",
    "UsageError",
    "ExtensionError",
    "__version__",
]
