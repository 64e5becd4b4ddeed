"""Finding, selecting, loading and calling extensions.

One fresh :class:`pluggy.PluginManager` per invocation (no module-global manager). Disabled
extensions are blocked *before* their entry point is imported, so a broken extension can always
be switched off with ``--no-ext NAME``.
"""
from __future__ import annotations

import importlib.metadata
import inspect
import os
from typing import Iterable, Optional

import attrs
import pluggy

from . import hookspecs
from .errors import ExtensionError, UsageError
from .hookspecs import NAME

ENTRY_POINT_GROUP = NAME
CORE_PLUGIN = "core"
# firstresult hooks where two providers would silently race: a second one is an error.
EXCLUSIVE_HOOKS = ("time_fn", "kernel_timer", "make_inputs", "op_shapes")
# hooks ``--timer NAME`` chooses between; NAME may provide either one
TIMER_HOOKS = ("time_fn", "kernel_timer")


@attrs.frozen
class ExtensionInfo:
    """What ``zlf plugins`` reports about one installed extension."""

    name: str
    distribution: str
    version: str
    status: str  # active | disabled | inactive | broken
    hooks: Optional[tuple] = None
    error: Optional[str] = None
    value: str = ""

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "hooks": list(self.hooks) if self.hooks is not None else None,
            "error": self.error,
            "entry_point": self.value,
        }


def installed_extensions() -> dict:
    """Entry points of group ``zlf`` by name (the first distribution wins on a duplicate)."""
    found = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)
    return dict(sorted(found.items()))


def _dist_of(ep) -> tuple:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return ("?", "?")
    return (dist.metadata["Name"] or "?", dist.version or "?")


def _split_names(values: Iterable[str]) -> list:
    names = []
    for v in values or ():
        names.extend(n.strip() for n in v.split(",") if n.strip())
    return names


@attrs.frozen
class Selection:
    """Which extensions the user asked for: ``only`` (None = all installed) minus ``disabled``."""

    only: Optional[tuple] = None
    disabled: tuple = ()

    @classmethod
    def from_args(cls, ext=None, no_ext=None, environ=None) -> "Selection":
        environ = os.environ if environ is None else environ
        only = _split_names(ext) or _split_names([environ.get("ZLF_EXTENSIONS", "")]) or None
        disabled = _split_names(no_ext) + _split_names([environ.get("ZLF_DISABLE", "")])
        return cls(tuple(only) if only is not None else None, tuple(dict.fromkeys(disabled)))


def _implemented_hooks(pm, plugin) -> tuple:
    return tuple(sorted(hc.name for hc in pm.get_hookcallers(plugin) or ()))


def build_plugin_manager(selection: Selection, extra_plugins=(), tolerant: bool = False):
    """Make a plugin manager with core defaults and the selected extensions.

    :param extra_plugins: ``(name, plugin)`` pairs registered directly (tests, embedding).
    :param tolerant: record broken extensions in the infos instead of raising (``zlf plugins``).
    :return: ``(pm, infos)`` where infos lists every installed extension.
    """
    from . import defaults

    pm = pluggy.PluginManager(NAME)
    pm.add_hookspecs(hookspecs)
    installed = installed_extensions()
    known = set(installed) | {name for name, _ in extra_plugins}
    for label, names in (("--ext/ZLF_EXTENSIONS", selection.only or ()), ("--no-ext/ZLF_DISABLE", selection.disabled)):
        unknown = [n for n in names if n not in known]
        if unknown:
            listing = ", ".join(sorted(known)) or "none"
            raise UsageError(f"unknown extension {', '.join(map(repr, unknown))} in {label}; installed: {listing}")

    for name in selection.disabled:
        pm.set_blocked(name)  # before import: a disabled broken extension is never touched
    pm.register(defaults, name=CORE_PLUGIN)

    infos = []
    wanted = set(selection.only) if selection.only is not None else None
    for name, ep in installed.items():
        dist, version = _dist_of(ep)
        base = dict(name=name, distribution=dist, version=version, value=ep.value)
        if name in selection.disabled:
            infos.append(ExtensionInfo(status="disabled", **base))
            continue
        if wanted is not None and name not in wanted:
            infos.append(ExtensionInfo(status="inactive", **base))
            continue
        try:
            plugin = ep.load()
            if inspect.isclass(plugin):
                plugin = plugin()
            pm.register(plugin, name=name)
        except Exception as exc:  # any failure of third-party code is reported, not raised raw
            error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            if not tolerant:
                raise ExtensionError(
                    f"extension {name!r} (entry point {name} = {ep.value}, distribution {dist} {version}) "
                    f"failed to load: {error} -- run with --no-ext {name} to go on without it"
                ) from exc
            infos.append(ExtensionInfo(status="broken", error=error, **base))
            continue
        infos.append(ExtensionInfo(status="active", hooks=_implemented_hooks(pm, plugin), **base))

    for name, plugin in extra_plugins:
        if name in selection.disabled or (wanted is not None and name not in wanted):
            continue
        pm.register(plugin, name=name)

    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        culprit = pm.get_name(exc.plugin) or "?"
        raise ExtensionError(
            f"extension {culprit!r} implements an unknown hook: {exc} -- run with --no-ext {culprit} to go on without it"
        ) from exc
    return pm, infos


class Hooks:
    """The one place core calls hooks: typed methods, keyword arguments only."""

    def __init__(self, pm: pluggy.PluginManager, infos=(), preferred: Optional[dict] = None):
        self.pm = pm
        self.infos = list(infos)
        self._preferred = dict(preferred or {})
        self._callers = {}
        self._kernel_timers = {}
        #: the extensions' declared options (:class:`zlf.config.OptionSet`), known once ``add_options`` ran
        self.option_sets: tuple = ()

    def check_exclusive(self) -> None:
        """Raise now if two extensions race for an exclusive hook. Commands that start runs call
        this before anything is written; others (``plugins``, ``compare``) never need to."""
        for hook in EXCLUSIVE_HOOKS:
            self._caller(hook)

    def _caller(self, hook: str):
        if hook not in self._callers:
            self._callers[hook] = self._exclusive_caller(hook, self._preferred.get(hook))
        return self._callers[hook]

    def _providers(self, hook: str) -> list:
        return [impl.plugin_name for impl in getattr(self.pm.hook, hook).get_hookimpls() if impl.plugin_name != CORE_PLUGIN]

    def _distribution(self, plugin_name: str) -> str:
        for info in self.infos:
            if info.name == plugin_name:
                return f"{info.distribution} {info.version}"
        return "registered directly"

    def _exclusive_caller(self, hook: str, preferred: Optional[str]):
        providers = self._providers(hook)
        if preferred and preferred not in providers and preferred != CORE_PLUGIN and hook in TIMER_HOOKS:
            others = {h: self._providers(h) for h in TIMER_HOOKS}
            if not any(preferred in p for p in others.values()):
                listing = "; ".join(f"{h}: {', '.join(p) or 'none'}" for h, p in others.items())
                raise UsageError(f"no active extension named {preferred!r} implements a timer ({listing})")
            if hook == "time_fn":
                # --timer names a kernel-activity timer: core's time_fn times every point with it
                preferred = CORE_PLUGIN
            else:
                preferred = None  # --timer names a time_fn; the kernel timer is chosen as usual
        if preferred:
            if preferred not in providers and preferred != CORE_PLUGIN:
                raise UsageError(f"no active extension named {preferred!r} implements {hook}; providers: {', '.join(providers) or 'none'}")
            drop = [self.pm.get_plugin(p) for p in providers if p != preferred]
            return self.pm.subset_hook_caller(hook, remove_plugins=drop)
        if len(providers) > 1:
            names = " and ".join(f"{p!r} ({self._distribution(p)})" for p in providers)
            option = " (choose one with --timer NAME)" if hook in TIMER_HOOKS else ""
            raise ExtensionError(
                f"two active extensions implement {hook}: {names}; keep one with --no-ext NAME{option}"
            )
        return getattr(self.pm.hook, hook)

    def implemented(self, hook: str) -> bool:
        """Whether any plugin other than core implements ``hook``."""
        return bool(self._providers(hook))

    # command line
    def add_options(self, parser):
        from .config import declared_options

        self.option_sets = declared_options(self.pm, parser)

    def add_commands(self, subparsers):
        self.pm.hook.add_commands(subparsers=subparsers)

    def add_campaign_options(self, parser):
        self.pm.hook.add_campaign_options(parser=parser)

    def configure(self, session):
        self.pm.hook.configure(session=session)

    # backends and ops
    def register_backends(self) -> list:
        return [b for group in self.pm.hook.register_backends() for b in (group or ())]

    def resolve_ops(self, spec, session):
        return self.pm.hook.resolve_ops(spec=spec, session=session)

    def op_shapes(self, op, shapes, session):
        return self._caller("op_shapes")(op=op, shapes=shapes, session=session)

    # run lifecycle
    def before_run(self, run):
        self.pm.hook.before_run(run=run)

    def before_point(self, run, point):
        self.pm.hook.before_point(run=run, point=point)

    def make_inputs(self, op, point, backend):
        return self._caller("make_inputs")(op=op, point=point, backend=backend)

    def kernel_timer(self, backend, options):
        """The kernel-activity timer offered for ``backend`` (asked once per backend), or None."""
        if backend not in self._kernel_timers:
            self._kernel_timers[backend] = self._caller("kernel_timer")(backend=backend, options=options)
        return self._kernel_timers[backend]

    def time_fn(self, fn, point, backend, options, op=None, inputs=None):
        # --timer core: core's event timer, whatever kernel timer is on offer
        kernel = None if self._preferred.get("time_fn") == CORE_PLUGIN else self.kernel_timer(backend, options)
        return self._caller("time_fn")(fn=fn, point=point, backend=backend, options=options, op=op, inputs=inputs,
                                       kernel_timer=kernel)

    def on_compile(self, event):
        self.pm.hook.on_compile(event=event)

    def on_launch(self, event):
        self.pm.hook.on_launch(event=event)

    def after_point(self, run, point, record):
        self.pm.hook.after_point(run=run, point=point, record=record)

    def after_run(self, run, results):
        self.pm.hook.after_run(run=run, results=results)

    # campaigns
    def after_campaign(self, campaign, results, options, session):
        self.pm.hook.after_campaign(campaign=campaign, results=results, options=options, session=session)
