"""Watching and pinning Triton's autotuner from outside, without forking it.

Two pieces, both installed before any kernel module is imported:

* :class:`TunerPatch` wraps ``run`` of ``triton.runtime.Autotuner`` and of every subclass that
  overrides it (FlagGems' ``LibTuner`` does; subclasses defined later are caught through
  ``Autotuner.__init_subclass__``). ``triton.heuristics`` above or below an autotuner ends in
  the same ``run``, so those kernels need nothing extra.
* :class:`TrackedCache` replaces each tuner's ``cache`` (a dict in Triton, FlagGems' sqlite-backed
  ``ConfigCache`` in a ``LibTuner``). Every ``run`` asks ``key not in self.cache`` with the very
  key Triton computed, so the cache is where a recorded config is pinned (no sweep follows), where
  a sweep's winner is seen, and where FlagGems' persistent winner is noticed -- on every Triton
  version, without re-deriving the key.

A pinned config that fails on its first launch (compile error, out of resources) is dropped
and the same call is repeated: the key is then missing, so the tuner sweeps live.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import attrs

from .records import (KernelIdentity, ReplaySource, canonical_key, config_from_json, config_to_json, key_to_json,
                      timings_to_json)

HOW_SWEPT = "swept"  # the autotuner benchmarked the configs in this process
HOW_LIBTUNER = "libtuner_cache"  # FlagGems' persistent cache answered, no sweep
HOW_REPLAYED = "replayed"  # pinned from the record, no sweep

#: exception types (by class name) that mean "this config does not compile / fit" on some platform.
_COMPILE_ERRORS = {"CompilationError", "CompileTimeAssertionFailure", "OutOfResources", "PTXASError",
                   "InterpreterError", "TypeError", "ValueError", "KeyError", "AssertionError"}


def failure_reason(exc: BaseException) -> str:
    names = {c.__name__ for c in type(exc).__mro__}
    if names & _COMPILE_ERRORS or (type(exc).__module__ or "").startswith("triton"):
        return "compile_error"
    return "launch_error"


@attrs.frozen
class Decision:
    """One tuning decision as this process used it."""

    kernel: KernelIdentity
    key: list
    config: dict
    how: str
    point: Optional[str] = None  # the point during which it was taken (None: before the first)
    fallback_reason: Optional[str] = None  # set when a replay could not use the record

    def to_json(self, current_point: Optional[str] = None) -> dict:
        d = {"kernel": self.kernel.name, "key": self.key, "config": self.config, "how": self.how}
        if self.fallback_reason:
            d["fallback_reason"] = self.fallback_reason
        if self.point != current_point:
            d["decided_in"] = self.point
        return d


class Tracker:
    """The decisions of this process, per tuner cache, and which ones the current point used.

    :param replay: the record to pin from, or None (record mode).
    :param on_decision: ``(decision, tuner, details)`` after every new or changed decision;
        ``details`` has ``timings_ms`` and ``bench_s`` for a sweep.
    :param on_fallback: ``(identity, key, reason, exc)`` when a recorded config cannot be used;
        ``exc`` is what its first launch raised (None when the record has no usable entry).
    """

    def __init__(self, replay: Optional[ReplaySource], on_decision: Callable, on_fallback: Callable):
        self.replay = replay
        self.on_decision = on_decision
        self.on_fallback = on_fallback
        self.point: Optional[str] = None
        self.caches: list = []
        self.decisions: dict = {}  # (id(cache), canonical key) -> Decision

    def decide(self, cache: "TrackedCache", key, how: str, config, reason=None, details=None) -> None:
        decision = Decision(cache.identity, key_to_json(key), config_to_json(config), how, self.point, reason)
        self.decisions[(id(cache), canonical_key(key))] = decision
        self.on_decision(decision, cache.tuner, details or {})

    def begin_point(self, point_id: str) -> None:
        self.point = point_id
        for cache in self.caches:
            cache.used.clear()

    def used(self) -> list:
        """The decisions the current point ran with (each once), sorted by kernel."""
        found = []
        for cache in self.caches:
            for key in list(cache.used):
                d = self.decisions.get((id(cache), canonical_key(key)))
                if d is not None:
                    found.append(d)
        return sorted(found, key=lambda d: (d.kernel.name, canonical_key(d.key)))

    def end_point(self) -> None:
        self.point = None


class TrackedCache(dict):
    """A tuner's config cache that records, pins and observes (see the module docstring).

    The dict holds every key this process has decided. For a FlagGems ``LibTuner`` the original
    persistent cache stays behind it (``inner``): read when the dict misses, written through on
    a sweep, never written with a pinned config.
    """

    def __init__(self, tuner, previous, tracker: Tracker):
        # Decisions taken before zlf watched (at import time, or in an earlier in-process run)
        # are dropped: the tuner decides them again, visibly, and a replay pins them.
        inner = previous.inner if isinstance(previous, TrackedCache) else previous
        super().__init__()
        if isinstance(inner, dict):
            inner = None
        self.inner = inner
        self.tuner = tuner
        self.tracker = tracker
        self.used: set = set()
        self.pending: list = []  # (key, how) decided during the current run() call
        self.pinned_now = None  # key pinned during the current run() call
        self.refused: dict = {}  # key -> why the record could not serve it
        self._identity: Optional[KernelIdentity] = None
        tracker.caches.append(self)

    @property
    def identity(self) -> KernelIdentity:
        if self._identity is None:
            self._identity = KernelIdentity.of(self.tuner)
        return self._identity

    # ------------------------------------------------------------------ what the tuner calls
    def __contains__(self, key) -> bool:
        if dict.__contains__(self, key):
            self.used.add(key)
            return True
        return self._first_sight(key)

    def __setitem__(self, key, config) -> None:  # a sweep (or Triton's disk cache) chose
        dict.__setitem__(self, key, config)
        self.used.add(key)
        if self.inner is not None:
            self.inner[key] = config
        self.pending.append((key, HOW_SWEPT))

    def __missing__(self, key):
        if self.inner is not None:
            return self.inner[key]
        raise KeyError(key)

    # ------------------------------------------------------------------ slow path
    def _first_sight(self, key) -> bool:
        replay = self.tracker.replay
        if replay is not None and key not in self.refused:
            found = replay.lookup(self.identity, canonical_key(key))
            reason = found.reason
            if found.config is not None:
                try:
                    config = self._original_config(config_from_json(found.config))
                except Exception:
                    reason = "bad_record"
                else:
                    dict.__setitem__(self, key, config)
                    self.used.add(key)
                    self.pinned_now = key
                    self.tracker.decide(self, key, HOW_REPLAYED, config)
                    return True
            self._refuse(key, reason, None)
        if self.inner is not None and key in self.inner:
            dict.__setitem__(self, key, self.inner[key])
            self.used.add(key)
            self.pending.append((key, HOW_LIBTUNER))
            return True
        return False

    def _original_config(self, config):
        """The tuner's own Config equal to ``config`` (it carries the pre_hook JSON cannot)."""
        wanted = config.all_kwargs()
        for candidate in getattr(self.tuner, "configs", ()):
            if candidate.all_kwargs() == wanted:
                return candidate
        return config

    def _refuse(self, key, reason: str, exc: Optional[BaseException]) -> None:
        self.refused[key] = reason
        self.tracker.on_fallback(self.identity, key_to_json(key), reason, exc)

    def pinned_failed(self, key, exc: BaseException) -> None:
        """The pinned config of ``key`` failed on its first launch: forget it, sweep live."""
        dict.pop(self, key, None)
        self.pinned_now = None
        self._refuse(key, failure_reason(exc), exc)

    def flush(self) -> None:
        """Report what the last run() call decided (after it returned: timings are set by then)."""
        self.pinned_now = None
        pending, self.pending = self.pending, []
        for key, how in pending:
            config = dict.get(self, key)
            if config is None:
                continue
            details = {}
            if how == HOW_SWEPT:
                details = {"timings_ms": timings_to_json(getattr(self.tuner, "configs_timings", None)),
                           "bench_s": getattr(self.tuner, "bench_time", None)}
            self.tracker.decide(self, key, how, config, reason=self.refused.get(key), details=details)


class TunerPatch:
    """Installs the ``run`` wrappers on ``Autotuner`` and its subclasses; ``remove`` undoes it."""

    def __init__(self, tracker: Tracker):
        self.tracker = tracker
        self._patched: list = []
        self._autotuner = None

    def install(self) -> None:
        from triton.runtime.autotuner import Autotuner

        self._autotuner = Autotuner
        pending = [Autotuner]
        while pending:
            cls = pending.pop()
            self._patch(cls)
            pending.extend(cls.__subclasses__())
        patch = self

        def __init_subclass__(cls, **kwargs):
            super(Autotuner, cls).__init_subclass__(**kwargs)
            patch._patch(cls)

        __init_subclass__.__zlf_autotune__ = True
        Autotuner.__init_subclass__ = classmethod(__init_subclass__)

    def remove(self) -> None:
        for cls, original in reversed(self._patched):
            if getattr(cls.__dict__.get("run"), "__zlf_original__", None) is original:
                cls.run = original
        self._patched = []
        hook = self._autotuner.__dict__.get("__init_subclass__") if self._autotuner else None
        if hook is not None and getattr(hook.__func__, "__zlf_autotune__", False):
            del self._autotuner.__init_subclass__

    def _patch(self, cls) -> None:
        fn = cls.__dict__.get("run")
        if fn is None:
            return
        original = getattr(fn, "__zlf_original__", fn)  # a wrapper left by an earlier session
        cls.run = self._wrap(original)
        self._patched.append((cls, original))

    def _wrap(self, original):
        tracker = self.tracker

        @functools.wraps(original)
        def run(tuner, *args, **kwargs):
            cache = tuner.__dict__.get("cache")
            if cache.__class__ is not TrackedCache or cache.tracker is not tracker:
                if cache is None:
                    return original(tuner, *args, **kwargs)
                tuner.cache = TrackedCache(tuner, cache, tracker)
            try:
                try:
                    return original(tuner, *args, **kwargs)
                except Exception as exc:
                    cache = tuner.cache
                    key = getattr(cache, "pinned_now", None)
                    if key is None:
                        raise
                    cache.pinned_failed(key, exc)
                    return original(tuner, *args, **kwargs)  # the key is missing now: live autotune
            finally:
                cache = tuner.cache
                if cache.__class__ is TrackedCache and (cache.pending or cache.pinned_now is not None):
                    cache.flush()

        run.__zlf_original__ = original
        return run
