"""The zlf hook specifications: every extension point of the host.

The docstrings below are the API. Hooks are called with keyword arguments only; an
implementation may accept any subset of a hook's arguments (pluggy opt-in arguments), so
hooks grow by adding arguments, never by renaming or reordering them.

Extensions implement hooks with ``from zlf import hookimpl`` and are found through the
``zlf`` entry-point group. Core's own defaults are registered ``trylast``.

A hook marked :func:`_exclusive` has at most one provider besides core's default: the plugin
manager reads the mark (:data:`EXCLUSIVE`, an :class:`Exclusive`) and makes a second provider
an error, unless the user picks one with the option the mark names.
"""
from __future__ import annotations

import attrs
import pluggy

NAME = "zlf"
#: attribute an exclusive hookspec carries: its :class:`Exclusive`.
EXCLUSIVE = "zlf_exclusive"
#: the option that picks the timer: the provider of ``time_fn`` or of ``kernel_timer``
#: (:attr:`zlf.config.TimingBudget.timer`).
TIMER = "--timer"

_spec = pluggy.HookspecMarker(NAME)


@attrs.frozen
class Exclusive:
    """How one exclusive hook is provided."""

    #: the option that picks a provider when several implement it (:data:`TIMER`), "" for none
    chosen_by: str = ""
    #: when that option names a provider of another hook it chooses, core's default provides this
    #: one (``--timer cupti``: core's time_fn, timing with cupti's kernel timer); else as usual
    core_when_other: bool = False


def _exclusive(chosen_by: str = "", core_when_other: bool = False):
    """Mark a ``firstresult`` hook that one active extension at most may implement (core's
    default aside); ``chosen_by`` is the option that picks one when several do (:data:`TIMER`)."""
    def mark(fn):
        setattr(fn, EXCLUSIVE, Exclusive(chosen_by, core_when_other))
        return fn

    return mark


# --------------------------------------------------------------------------- command line
@_spec
def add_options(parser, command, traits):
    """Add run options to every command they apply to (``zlf run``, ``zlf ab``, ``zlf ops``,
    an extension's command).

    Called once per invocation and command whose :class:`zlf.options.CommandTraits` say run
    options apply (``traits.run_options``), after extension selection and before the final
    parse, so an option exists only while its extension is active. Ask ``traits`` what the
    command does, never its name: a third party's command that times points is timed as
    ``zlf run`` is.

    :param parser: the :class:`argparse.ArgumentParser` of the command; add an argument group
        named after the extension.
    :param command: the command's name (for messages only).
    :param traits: the :class:`zlf.options.CommandTraits` of the command: ``times_points``
        (timers' options), ``makes_inputs`` (seeding), ``plans_shapes`` (shape files, op
        sources), ``forwards_run_options`` (``zlf ab``: the options go to its runs). Return
        without adding anything where the options do not apply, so that ``--help`` lists only
        what does (an implementation without this argument is called for every such command).
    :return: nothing.
    """


@_spec
def add_commands(subparsers):
    """Add whole sub-commands to the ``zlf`` command line (e.g. ``zlf ir``, ``zlf task``).

    Called once per invocation while the parser is built, after extension selection.

    :param subparsers: the object returned by ``ArgumentParser.add_subparsers``. Add a parser
        and give it ``set_defaults(handler=callable, traits=CommandTraits(...))``; the callable
        receives ``(args, session)`` and returns the process exit code. The
        :class:`zlf.options.CommandTraits` say what the command does, and so what it takes:
        core's run options and every active extension's :func:`add_options` where run options
        apply, ``--config FILE`` with ``config_file`` (its run settings from a
        :class:`zlf.config.RunConfig` file, as a campaign's runs get them), and
        :func:`add_campaign_options` with ``runs_campaigns``. Core's own commands (``run``,
        ``compare``, ``ab`` ...) are added through this hook too, first.
    :return: nothing.
    """


@_spec
def add_campaign_options(parser):
    """Add options to ``zlf ab`` that belong to the campaign itself, not to its runs.

    Called once per invocation for every command whose traits say ``runs_campaigns``
    (``zlf ab``), while the parser is built, after extension selection.
    Unlike :func:`add_options`, these options are never passed on to the campaign's ``zlf run``
    processes; read them in :func:`campaign_setup` and :func:`after_campaign` (``options.campaign``,
    typed as declared, like :func:`add_options`' options).

    :param parser: the :class:`argparse.ArgumentParser` of the ``ab`` command; add an argument
        group named after the extension.
    :return: nothing.
    """


@_spec
def configure(session):
    """The command line is parsed; nothing has been chosen or imported yet.

    Called once per invocation, before the backend is chosen and before any op module (and so
    any kernel, FlagGems included) is imported: the place to set environment variables that
    libraries read at import time.

    :param session: the :class:`zlf.session.Session` (``session.config`` is the run's
        :class:`zlf.config.RunConfig`, ``session.options`` the parsed namespace).
    :return: nothing.
    """


# --------------------------------------------------------------------------- backends and ops
@_spec
def register_backends():
    """Declare the backends (device platforms) this extension provides.

    Called once per invocation before a backend is chosen; a backend must not import its
    vendor stack at registration time.

    :return: a list of :class:`zlf.backends.Backend` subclasses (not instances).
    """


@_spec(firstresult=True)
def resolve_ops(spec, session):
    """Turn one OP argument of ``zlf run`` into ops.

    Called for every positional OP of ``zlf run`` after the backend is chosen (so kernels may be
    decorated safely). First non-None result wins; core's default (``trylast``) knows the
    built-in ops and ``path/to/file.py::name``.

    :param spec: the OP string as typed by the user.
    :param session: the :class:`zlf.session.Session` (options, backend).
    :return: a list of :class:`zlf.ops.Op`, or None when this extension does not know ``spec``.
    """


@_exclusive()
@_spec(firstresult=True)
def op_shapes(op, shapes, session):
    """Override the shapes of one op before the run is planned.

    Called once per op, before the run directory exists: raise :class:`zlf.UsageError` for bad
    input and nothing is left on disk. Exclusive: two active extensions implementing it are an
    error.

    :param op: the :class:`zlf.ops.Op`.
    :param shapes: the shapes core would use (a list of int tuples).
    :param session: the :class:`zlf.session.Session`.
    :return: a list of shapes (tuples of ints) to use instead, or None to keep ``shapes``.
    """


@_spec
def env_prefixes():
    """Name the environment variables that change what this extension compiles or times.

    Called once per run, when meta.json is made: variables starting with any prefix an active
    extension (or core: ``TRITON_``, ``CUDA_``, ``TORCH_`` ...) names are recorded in its
    ``environment`` (less any that looks like a credential), and a process that re-creates a
    run (``zlf profile``) sets them as the run had them.

    :return: a sequence of prefix strings (``("FLAGGEMS", "GEMS_")``); a full name is a prefix too.
    """


# --------------------------------------------------------------------------- run lifecycle
@_spec
def before_run(run):
    """Start of a run: called once per process, after the run directory exists and before the
    first point.

    Typical use: seed generators, install compiler hooks, patch an autotuner, add to
    ``run.meta`` (written to meta.json).

    :param run: the :class:`zlf.run.Run` (``run.dir``, ``run.config``, ``run.options``, ``run.backend``,
        ``run.meta``, ``run.log``).
    :return: nothing.
    """


@_spec
def before_point(run, point):
    """A point is about to get its inputs and first (checked) call.

    Called once per point, in plan order, before its inputs are made (``op.make_inputs``).

    :param run: the :class:`zlf.run.Run`; ``run.mark(...)`` and ``run.annotate(...)`` attach
        marker lines and fields to this point's record.
    :param point: the :class:`zlf.records.Point`.
    :return: nothing.
    """


@_exclusive(chosen_by=TIMER, core_when_other=True)
@_spec(firstresult=True)
def time_fn(fn, point, backend, options, op, inputs, kernel_timer, call_on):
    """Time a callable that runs the point once per call.

    Called once per point, after its first call was checked against the reference. Exclusive:
    two active non-default implementations are an error unless the user selects one
    (``--timer NAME``); a None result lets core's default (``trylast``) time it, with
    ``kernel_timer`` when one is offered, else each sample with the backend's events (host
    wall-clock on ``cpu``).

    :param fn: a no-argument callable; one call = one execution of the point.
    :param point: the :class:`zlf.records.Point`.
    :param backend: the active :class:`zlf.backends.Backend`.
    :param options: the :class:`zlf.config.TimingBudget` (``warmup_ms``, ``rep_ms``, ``flush_l2``,
        ``min_samples``, ``max_samples``; ``None`` means the backend's default: ``options.budgets(backend)``,
        ``options.flush(backend)``); ``options.option(NAME)`` reads an extension's option, and
        attribute access (``options.rep_ms``, ``options.cudagraph_replay_ms``) reads as the namespace did.
    :param op: the :class:`zlf.ops.Op` (``op.outputs`` names the output buffers in ``inputs``,
        ``op.reference`` the expected result), e.g. to verify a replayed graph's result. Tensor
        work of the timer's own between calls (copies, poison, comparisons) belongs inside
        ``zlf.ops.outside(op)``: some ops hold an environment across calls (``Op.outside``).
    :param inputs: the tuple ``fn`` runs on (already checked once against the reference).
    :param kernel_timer: the :class:`zlf.timing.KernelTimer` offered for this backend through
        :func:`kernel_timer` (None when there is none, or with ``--timer core``): what a timer
        that cannot use its own method for a point (a graph timer whose capture failed) times
        it with, rather than with host-inclusive events.
    :param call_on: ``call_on(args)`` gives a no-argument callable that runs the point on ``args``
        (a tuple shaped like ``inputs``), when ``fn`` is exactly that call on ``inputs``; None
        otherwise (a task candidate, FlagGems' torch side). Core's timer uses it, with L2
        flushed, to cycle the calls through copies of the inputs (``--input-copies``,
        :func:`zlf.timing.input_copies`).
    :return: a :class:`zlf.records.Timing`, or None to let the next timer decide.
    """


@_exclusive(chosen_by=TIMER)
@_spec(firstresult=True)
def kernel_timer(backend, options):
    """Offer a kernel-activity timer: the device time of every kernel a call launched, on any
    stream, read from the platform's activity tracing (CUPTI on NVIDIA), host time excluded.

    Called once per backend instance, when the first point is timed; the result is passed to
    every ``time_fn`` as ``kernel_timer``. Exclusive: two active extensions implementing it are
    an error unless ``--timer NAME`` chooses one; a None result lets core's default
    (``trylast``) return the backend's own (:meth:`zlf.backends.Backend.kernel_timer`).
    An extension that cannot trace on this machine says why in one line and returns None.

    :param backend: the active :class:`zlf.backends.Backend` (``backend.activity_api`` names
        the platform's tracing interface, e.g. ``cupti``).
    :param options: the :class:`zlf.config.TimingBudget` (as for :func:`time_fn`).
    :return: a :class:`zlf.timing.KernelTimer`, or None.
    """


@_spec
def on_compile(event):
    """A Triton kernel was compiled, or loaded from Triton's disk cache, in this process.

    Called from inside the compiler (not for the JIT's in-process cache hits). Fed by core
    from the platform's compiler hooks (the backend knows the hook API). Only
    installed when an active extension implements this hook.

    :param event: a :class:`zlf.records.CompileEvent`.
    :return: nothing.
    """


@_spec
def on_launch(event):
    """A Triton kernel was launched by the point's first (checked) call.

    Called on the host at every launch during that call (autotune sweeps included). Timed
    repetitions are not reported (a host-side hook inside the timed region would inflate
    what it measures). Only installed when an active extension implements this hook.

    :param event: a :class:`zlf.records.LaunchEvent`.
    :return: nothing.
    """


@_spec
def after_point(run, point, record):
    """A point finished (measured, failed or skipped); its record is about to be appended.

    Called once per point, after timing (or failure) and before the record is written; values
    given to ``run.annotate`` / ``run.mark`` here still reach the record.

    :param run: the :class:`zlf.run.Run`.
    :param point: the :class:`zlf.records.Point`.
    :param record: the :class:`zlf.records.PointRecord` that will be written.
    :return: nothing.
    """


@_spec
def after_run(run, results):
    """End of a run: called once per process, also when the run stopped on an error or Ctrl-C.

    :param run: the :class:`zlf.run.Run`; ``run.status`` is ``complete``, ``interrupted`` or
        ``crashed``.
    :param results: the list of :class:`zlf.records.PointRecord` written so far.
    :return: nothing.
    """


# --------------------------------------------------------------------------- campaigns
@_spec
def after_campaign(campaign, results, options, session):
    """A ``zlf ab`` campaign finished: every run is done and the summary is written.

    Called once, in the campaign's driver process, after summary.log / summary.json /
    report.md exist and before ``zlf ab`` exits; not called for a campaign that was
    interrupted or stopped (``--resume`` finishes it, and calls this then). Work done here runs
    after every timing run, so it never disturbs one; start any process that touches the
    device yourself (the driver imports no kernel).

    :param campaign: the :class:`zlf.ab.campaign.Campaign` (``campaign.path``, ``campaign.runs``,
        ``campaign.sides``, ``campaign.run_dir(run)``).
    :param results: the list of :class:`zlf.stats.PointStats` of the reported ops (verdicts).
    :param options: the ``zlf ab`` command line, typed: a :class:`zlf.ab.extending.CampaignOptions`
        (``options.campaign``: the options added through :func:`add_campaign_options`;
        ``options.run``: the run settings, a :class:`zlf.config.RunConfig`; ``options.get(dest)``
        either extension option). With ``--resume``: that command line's.
    :param session: the :class:`zlf.session.Session` of the ``zlf ab`` invocation (its hooks and
        extensions: the ones the campaign's runs used).
    :return: nothing.
    """


# --------------------------------------------------------------------------- campaigns: what an extension adds
# ``zlf ab`` knows no extension by name: everything an extension adds to a campaign comes
# through the hooks of this block.
@_spec
def campaign_setup(plan, options, session):
    """A new ``zlf ab`` campaign is being built: change its plan.

    Called once in the driver, before the sides are built and before anything is written.
    Refuse an option combination with :class:`zlf.UsageError`.

    :param plan: the :class:`zlf.ab.extending.CampaignPlan`: set ``ops`` (e.g. task packages
        instead of OPs), ``side_args`` (arguments that tell side A's runs from B's),
        ``options`` (your run options' values in every run's configuration), ``run_args``
        (arguments of the ops' own command that are no run setting), ``extensions`` (extensions
        every run must select),
        ``own_options`` (run options the campaign sets itself), ``not_switches``, ``per_op``,
        ``label``, and ``data`` (fields of campaign.json your other hooks read back). With
        ``zlf ab --library SOURCE`` (``options.library``), the extension that knows SOURCE as an
        op source sets ``library`` (every op spec of it) and ``library_source``; zlf ab then
        samples or filters them (``--sample``, OP arguments) into ``ops``.
    :param options: the ``zlf ab`` command line, typed: a :class:`zlf.ab.extending.CampaignOptions`
        (``options.ops``, ``options.aa``, ``options.a_env`` ... as given; ``options.run``: the run
        settings, a :class:`zlf.config.RunConfig`; ``options.campaign``: your
        :func:`add_campaign_options`' values; ``options.get(dest)`` either extension option).
    :param session: the driver's :class:`zlf.session.Session`.
    :return: nothing.
    """


@_spec
def campaign_run_needs(campaign, op, round, side):
    """What one run of a campaign needs: run option values, extensions, and earlier runs it reads.

    Called in the driver whenever a run's configuration or spec is built, and when the runs are
    grouped into processes and work units; answer from ``campaign.data`` (what your
    :func:`campaign_setup` stored), so that ``--resume`` gets the same answer.

    :param campaign: the :class:`zlf.ab.campaign.Campaign`.
    :param op: the run's :class:`zlf.ab.campaign.OpSpec`.
    :param round: the run's round (1-based).
    :param side: ``"A"`` or ``"B"``.
    :return: a list of :class:`zlf.ab.extending.RunNeed` (results of all extensions are joined).
        Its ``options`` and ``extensions`` change the run's configuration file (never its
        command line). A need on an earlier run (``round``/``side``) orders the runs, carries
        ``path`` to where the run executes, and applies only once ``path`` exists.
    """


@_spec
def campaign_context(data):
    """Lines that describe what an extension does to a campaign (e.g. "autotune replay: on").

    Called in the driver when a campaign is created and each time it starts or resumes; the
    lines are printed then, by ``--dry-run`` and in the report, and stored in campaign.json as
    ``context``.

    :param data: the campaign.json fields (a dict).
    :return: a list of one-line strings (results of all extensions are joined).
    """


@_spec
def campaign_guards(campaign, ops):
    """Guard lines of a finished campaign (e.g. "the switch changed no compiled code").

    Called once in the driver after every run, before the summary is written; not for an A/A
    campaign. The lines go to summary.log, summary.json (``guards``) and the report.

    :param campaign: the :class:`zlf.ab.campaign.Campaign`.
    :param ops: names of the ops that are reported (every run finished ok).
    :return: a list of strings (results of all extensions are joined).
    """


@_spec(firstresult=True)
def campaign_split_item(item, dest, shapes, link):
    """Copy one file or folder of a shared process's run directory into one op's run directory.

    Called in the driver for each top-level file or folder when a campaign that ran several ops
    in one process splits its run directory per op; what no extension handles is copied whole.

    :param item: the :class:`pathlib.Path` of the file or folder in the shared run directory.
    :param dest: where it goes in the op's run directory (does not exist yet).
    :param shapes: the op's shapes as directory names (:func:`zlf.records.shape_str`).
    :param link: ``link(src, dst)`` links (or copies) one file.
    :return: True when handled; None to leave it to core (first non-None result wins).
    """


@_spec(firstresult=True)
def ir_status(a_dir, b_dir):
    """Per shape, how the compiled code of two runs differs (``zlf compare``'s IR column).

    Called once by ``zlf compare`` and ``zlf report`` for the two run directories they pair.

    :param a_dir: the first run directory (:class:`pathlib.Path`).
    :param b_dir: the second.
    :return: ``{shape dir name: status}`` (``identical``, ``changed``, ``only A``, ``only B``),
        or None when the runs hold no compiled code you know (first non-None result wins).
    """
