"""Backends shipped with core (``cpu``, ``cuda``) and the contract vendors implement."""
from .base import Backend, HostEvent
from .cpu import CpuBackend
from .cuda import CudaBackend

__all__ = ["Backend", "HostEvent", "CpuBackend", "CudaBackend"]
