"""Which timer a task's candidate and baseline are timed with: one family for every language.

A Triton candidate can be captured into a CUDA graph; a CUDA C++ candidate launched through
ctypes on the legacy default stream cannot, so under the graph timer the two land on different
timers and ``zlf compare`` refuses every pair. A kernel-activity timer (an extension's
``kernel_timer``, e.g. ``cupti``) sees kernels on any stream, so by default ``zlf task`` times
every candidate and the baseline with it, when one is offered for the run's backend. Without one,
the run keeps the active ``time_fn`` (graph where capture works, marked fallback) or core's
event timer, and says so in one line. ``--timer`` always wins.
"""
from __future__ import annotations

import contextlib
import io
from typing import Optional

import attrs

#: how to get a kernel-activity timer where none is installed
DEFAULT_HINT = "pip install -e extensions/timing_cupti"


@attrs.frozen
class TimerChoice:
    """``timer``: the name records will carry; ``provider``: what ``--timer`` is set to for the
    workers (None: left as it was); ``why``: the one line said on stderr and kept in meta.json."""

    timer: str
    provider: Optional[str]
    why: str
    kernel_timer: bool = False

    def to_json(self) -> dict:
        return attrs.asdict(self)


def extension_providers(hooks, hook: str) -> list:
    """The active extensions (never core's own plugins) implementing ``hook``."""
    from zlf.plugins import DEFAULT_PLUGINS

    return [impl.plugin_name for impl in getattr(hooks.pm.hook, hook).get_hookimpls()
            if impl.plugin_name not in DEFAULT_PLUGINS]


def _reason(captured: str) -> str:
    """The text of a warning an extension printed when it offered no timer, on one line."""
    lines = [l.strip() for l in captured.splitlines() if l.strip()]
    text = lines[-1] if lines else ""
    return text.removeprefix("zlf: warning: ").removesuffix("; core's timer decides")


def choose(session, backend) -> TimerChoice:
    """The timer of a ``zlf task`` run on ``backend`` (see the module docstring)."""
    hooks, timing = session.hooks, session.config.timing
    if timing.timer:
        return TimerChoice(timing.timer, None, f"timer: {timing.timer} (chosen with --timer)")
    offering = extension_providers(hooks, "kernel_timer")
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured):  # an extension's "none here" warning becomes the why
        kernel = hooks.kernel_timer(backend, timing)
    if kernel is not None and offering:
        name = getattr(kernel, "name", offering[0])
        return TimerChoice(name, offering[0], f"timer: {name} for every candidate and the baseline (kernel-activity "
                           f"timer of extension {offering[0]!r}: device time of every kernel a call launches, on "
                           "any stream, whatever the candidate's language)", kernel_timer=True)
    if offering:
        why = _reason(captured.getvalue()) or f"extension {offering[0]!r} offered none for backend {backend.name!r}"
    else:
        why = f"no kernel-activity timer installed ({DEFAULT_HINT})"
    graph = extension_providers(hooks, "time_fn")
    if backend.host_timing:
        return TimerChoice(backend.timer_name, None, f"timer: {backend.timer_name} (backend {backend.name!r} times "
                           f"on the host; {why})")
    if graph:
        return TimerChoice(graph[0], None, f"timer: {graph[0]} where it can time a call, else its marked fallback "
                           f"(a CUDA C++ candidate on the legacy default stream cannot be captured, so its times "
                           f"pair with no graph-timed run; {why})")
    return TimerChoice(backend.timer_name, None, f"timer: {backend.timer_name} (core's event timer; {why})")


def apply(session, backend) -> TimerChoice:
    """Choose (:func:`choose`) and make the workers' configuration use the choice."""
    choice = choose(session, backend)
    if choice.provider:
        config = session.config
        session.config = attrs.evolve(config, timing=config.timing.with_changes(timer=choice.provider))
    return choice
