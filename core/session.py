"""One invocation of zlf: parsed options, the plugin manager facade, the chosen backend.

Made fresh per invocation (tests make as many as they like); nothing here is module-global.
"""
from __future__ import annotations

import os
from typing import Optional

import attrs

from .config import RunConfig
from .console import clean, warn
from .errors import UsageError
from .ops import Op
from .hookspecs import TIMER
from .options import CommandTraits
from .plugins import Hooks, Selection, build_plugin_manager
from .records import Point


@attrs.define
class PlannedPoint:
    op: Op
    point: Point


def select_backend(known: dict, name: Optional[str] = None, check: bool = True, environ=None):
    """The backend class a run uses, never set up here: ``name`` (else ``ZLF_BACKEND``) when
    given, else the available one of highest priority, less any an available backend
    supersedes (``Backend.supersedes``). None when nothing is available.

    :param known: ``{name: Backend subclass}`` (:meth:`Session.backends`).
    :param check: refuse a named backend this process cannot use; False where the runs happen
        elsewhere (a driver that only starts workers, perhaps on other machines).
    """
    environ = os.environ if environ is None else environ
    name = name or environ.get("ZLF_BACKEND") or None
    if name:
        if name not in known:
            raise UsageError(f"unknown backend {name!r}; known: {', '.join(sorted(known))}")
        cls = known[name]
        if not check:
            return cls
        # available_when_forced: a platform detection cannot always identify (behind another's API)
        if not cls.is_available() and not getattr(cls, "available_when_forced", lambda: False)():
            raise UsageError(cls.unavailable_reason())
        claimer = _superseded_by(known, name)
        if claimer is not None:
            raise UsageError(f"backend {name!r} stands aside: this machine is backend {claimer.name!r}'s "
                             f"({claimer.description}); use --backend {claimer.name}")
        return cls
    available = [c for c in known.values() if c.is_available()]
    superseded = {n for c in available for n in getattr(c, "supersedes", ())}
    candidates = [c for c in available if c.name not in superseded]
    return max(candidates, key=lambda c: c.priority) if candidates else None


def _superseded_by(known: dict, name: str):
    """The available backend that claims the machine of backend ``name``, or None."""
    for cls in known.values():
        if name in getattr(cls, "supersedes", ()) and cls.name != name and cls.is_available():
            return cls
    return None


def shapes_by_op(plan) -> dict:
    """``{op name: [shape, ...]}`` in plan order: what shapes.yaml records."""
    shapes: dict = {}
    for p in plan:
        seen = shapes.setdefault(p.op.name, [])
        if p.point.shape not in seen:
            seen.append(p.point.shape)
    return shapes


class Session:
    def __init__(self, options, hooks: Hooks):
        self.options = options
        self.hooks = hooks
        self.backend = None
        self.op_args: list = []
        self.plan_notes: list = []
        #: the command line as given (``zlf.cli.main``'s argv), for a command that runs itself again
        self.argv: tuple = ()
        #: the ``(name, plugin)`` pairs passed in-process (``main(..., extra_plugins=...)``) that
        #: the extension selection left registered, for a command that runs itself again in
        #: another process and takes them along
        self.extra_plugins: tuple = ()

    # ------------------------------------------------------------------ configuration
    @property
    def options(self):
        """The parsed command line (a namespace; :meth:`RunConfig.namespace` when opened from a config)."""
        return self._options

    @options.setter
    def options(self, value) -> None:
        self._options, self._config = value, None

    @property
    def config(self) -> RunConfig:
        """The run's :class:`~zlf.config.RunConfig` (read from ``options`` unless one was set)."""
        if self._config is None:
            self.config = RunConfig.from_args(self._options)
        return self._config

    @config.setter
    def config(self, value: RunConfig) -> None:
        self._config = value
        # --timer picks the provider of every exclusive hook it chooses (time_fn, kernel_timer)
        self.hooks.choose(TIMER, value.timing.timer)

    @property
    def traits(self) -> CommandTraits:
        """What the command of this invocation does (:class:`~zlf.options.CommandTraits`); a child
        process opened from a config (:meth:`open`) runs no command of its own: no traits."""
        return getattr(self._options, "traits", None) or CommandTraits()

    @classmethod
    def create(cls, options, extra_plugins=(), tolerant: bool = False) -> "Session":
        """A session whose extensions are the ones ``options`` select: a namespace's ``ext`` /
        ``no_ext``, or a RunConfig (then it is the session's config)."""
        selection = Selection.from_args(getattr(options, "ext", None), getattr(options, "no_ext", None))
        pm, infos = build_plugin_manager(selection, extra_plugins=extra_plugins, tolerant=tolerant)
        config = options if isinstance(options, RunConfig) else None
        session = cls(config.namespace() if config is not None else options, Hooks(pm, infos))
        # those --ext/--no-ext left registered: what the session runs, as the plugin manager decided
        session.extra_plugins = tuple((name, plugin) for name, plugin in extra_plugins if pm.get_plugin(name) is plugin)
        if config is not None:
            session.config = config
        return session

    @classmethod
    def open(cls, config: RunConfig, extra_plugins=()) -> "Session":
        """A configured session for ``config`` (a child process's start: a probe, a task worker);
        the backend is chosen next with ``choose_backend(config.backend, config.device)``."""
        session = cls.create(config, extra_plugins=extra_plugins)
        session.hooks.configure(session=session)
        return session

    # ------------------------------------------------------------------ backend
    def backends(self) -> dict:
        found = {}
        for cls in self.hooks.register_backends():
            if cls.name in found and found[cls.name] is not cls:
                raise UsageError(f"two extensions register a backend named {cls.name!r}")
            found[cls.name] = cls
        return found

    def choose_backend(self, name: Optional[str] = None, device: int = 0):
        """Pick ``name`` (or ``ZLF_BACKEND``, or the best available), set it up, return it."""
        cls = select_backend(self.backends(), name)
        if cls is None:
            raise UsageError("no backend is available on this machine")
        backend = cls(device)
        backend.setup()
        self.backend = backend
        return backend

    # ------------------------------------------------------------------ ops and points
    def resolve_ops(self, specs) -> list:
        ops = []
        #: ``[(spec, [op names])]``: which op argument gave which ops (meta.json's ``op_args``)
        self.op_args = []
        for spec in specs or ["builtin"]:
            found = self.hooks.resolve_ops(spec, self)
            if not found:
                from .ops import BUILTIN_OPS

                raise UsageError(
                    f"unknown op {spec!r}: not a built-in op ({', '.join(BUILTIN_OPS)}), "
                    "not FILE.py[::NAME], and no active extension knows it"
                )
            ops.extend(found)
            self.op_args.append((spec, [op.name for op in found]))
        names = [op.name for op in ops]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise UsageError(f"op {dupes[0]!r} named twice on the command line")
        return ops

    def plan(self, ops, dtypes=None) -> list:
        """Every (op, point) to run, in order; shapes may come from extensions (``op_shapes``)."""
        planned, seen = [], set()
        #: one line per point listed more than once (a shape or dtype given twice), said once per run
        self.plan_notes = []
        for op in ops:
            shapes = op.default_shapes(self.backend)
            override = self.hooks.op_shapes(op, shapes, self)
            if override is not None:
                shapes = [tuple(int(d) for d in s) for s in override]
            for shape in shapes:
                why = op.check_shape(shape)
                if why:
                    raise UsageError(why)
            for dtype in dtypes or op.default_dtypes(self.backend):
                from .ops import torch_dtype

                torch_dtype(dtype)  # validates the name
                for shape in shapes:
                    labels = op.variants(shape, dtype) if op.variants else [""]
                    for label in labels:
                        point = Point(op.name, shape, dtype, label)
                        if point.id in seen:  # one id, one record: a second would break pairing
                            self.plan_notes.append(f"point {clean(point.id)} is listed more than once (a shape, "
                                                   "dtype or variant given twice); it runs once")
                            continue
                        seen.add(point.id)
                        planned.append(PlannedPoint(op, point))
        for note in dict.fromkeys(self.plan_notes):
            warn(note)
        return planned
