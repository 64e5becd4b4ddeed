"""Inside the profiled process: profiling on around the point's calls only.

``zlf profile`` starts ``ncu --profile-from-start off ... python -m zlf run ...`` with
``ZLF_PROFILE_POINT`` (the point id) and ``ZLF_PROFILE_CALLS`` (how many calls) in the
environment. Here the point's callable is wrapped so that its first calls -- the checked call,
then the direct timer's first calls -- run between ``cudaProfilerStart`` and ``cudaProfilerStop``;
launches made by Triton's autotuner while it benchmarks configs switch profiling off again, so a
sweep (a run without an autotune record to replay) is never profiled.
"""
from __future__ import annotations

import os
from typing import Optional

ENV_POINT = "ZLF_PROFILE_POINT"
ENV_CALLS = "ZLF_PROFILE_CALLS"
DEFAULT_CALLS = 3


def _cudart():
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return torch.cuda.cudart()
    except Exception:
        return None


class ProfiledPoint:
    """Wraps the target point's callable; switches the profiler on and off."""

    def __init__(self, point_id: str, calls: int = DEFAULT_CALLS):
        self.point_id = point_id
        self.calls = max(1, calls)
        self.done = 0
        self.in_call = False
        self.on = False
        self._cudart = _cudart()
        self._op = None
        self._fn = None
        self.errors: list = []

    @classmethod
    def from_environment(cls) -> Optional["ProfiledPoint"]:
        point = os.environ.get(ENV_POINT)
        if not point:
            return None
        try:
            calls = int(os.environ.get(ENV_CALLS) or DEFAULT_CALLS)
        except ValueError:
            calls = DEFAULT_CALLS
        return cls(point, calls)

    def _switch(self, on: bool) -> None:
        if on == self.on:
            return
        self.on = on
        if self._cudart is None:
            return  # no CUDA here (cpu backend, tests): nothing to switch
        try:
            (self._cudart.cudaProfilerStart if on else self._cudart.cudaProfilerStop)()
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def begin(self, op, backend) -> None:
        """Wrap ``op.fn`` for the target point (the op object is shared by its points)."""
        if self._op is not None:
            return
        fn = op.fn
        self._op, self._fn = op, fn

        def profiled(*args, **kwargs):
            if self.done >= self.calls:
                return fn(*args, **kwargs)
            self.done += 1
            backend.synchronize()
            self.in_call = True
            self._switch(True)
            try:
                return fn(*args, **kwargs)
            finally:
                backend.synchronize()
                self._switch(False)
                self.in_call = False

        object.__setattr__(op, "fn", profiled)  # Op is frozen; restored in end()

    def launched(self, event) -> None:
        if self.in_call:
            self._switch(not event.in_autotune)

    def end(self) -> dict:
        if self._op is not None:
            object.__setattr__(self._op, "fn", self._fn)
        self._switch(False)
        out = {"point": self.point_id, "calls": self.done, "profiler": self._cudart is not None}
        if self.errors:
            out["errors"] = self.errors[:3]
        self._op = self._fn = None
        return out
