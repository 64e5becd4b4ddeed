"""Runtime Error: dereferences a null pointer (the process dies with SIGSEGV)."""
import ctypes


def run_kernel(a, b, out, n):
    ctypes.string_at(0)
