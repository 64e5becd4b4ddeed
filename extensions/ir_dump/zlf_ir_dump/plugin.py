"""Hooks of the ``ir_dump`` extension: ``--ir KINDS`` on ``zlf run``, the ``ir/`` tree of every
run, and the sub-commands ``zlf ir`` (IR without a GPU) and ``zlf ir-diff`` (compare two trees).

One instance per invocation (the entry point is this class), so two sessions in one process
never share a collector.
"""
from __future__ import annotations

from zlf import hookimpl
from zlf_ir_dump.irtree import IR_DIR

from . import campaign as campaign_mod

from .collector import IrDump, parse_kinds


class IrDumpPlugin:
    def __init__(self):
        self.dump = None

    @hookimpl
    def add_options(self, parser, traits):
        if not traits.times_points:  # a command that times points compiles and launches kernels
            return
        add_ir_argument(parser.add_argument_group("ir_dump (extension)"))

    @hookimpl
    def add_commands(self, subparsers):
        from . import aot, ir_diff

        p = subparsers.add_parser("ir", help="compile ops for a GPU target on this machine and dump their IR (no GPU needed)",
                                  description=aot.__doc__.strip().splitlines()[0])
        aot.configure_parser(p)
        p.set_defaults(handler=aot.main)
        p = subparsers.add_parser("ir-diff", help="compare the IR trees of two run directories",
                                  description=ir_diff.__doc__.strip().splitlines()[0])
        ir_diff.configure_parser(p)
        p.set_defaults(handler=ir_diff.main)

    @hookimpl
    def before_run(self, run):
        backend = run.backend
        kinds = parse_kinds(run.config.options.get("ir"), getattr(backend, "ir_kinds", ()))
        run.meta["ir_dump"] = {"kinds": list(kinds)}
        if not getattr(backend, "ir_kinds", ()):
            # The cpu backend interprets kernels: nothing is compiled, no hook fires.
            line = (f"ir_dump: backend {backend.name!r} compiles no IR (interpreter); no ir/ tree is written. "
                    "For IR without a GPU use: zlf ir OP --target cuda:90")
            run.log.warning(line)
            run.meta["ir_dump"]["skipped"] = line
            return
        unknown = [k for k in kinds if k not in backend.ir_kinds]
        if unknown:
            run.log.warning(f"ir_dump: backend {backend.name!r} lists IR kinds {', '.join(backend.ir_kinds)}; "
                            f"{', '.join(unknown)} will be dumped only where the compiler produces it")
        self.dump = IrDump(run.dir / IR_DIR, kinds, note=run.log.info)
        self.dump.guard.install()

    @hookimpl
    def before_point(self, run, point):
        if self.dump is not None:
            self.dump.collector.begin_point(point)

    @hookimpl
    def after_point(self, run, point, record):
        if self.dump is not None:
            self.dump.collector.end_point()

    @hookimpl
    def on_compile(self, event):
        if self.dump is not None:
            self.dump.collector.compiled(event)

    @hookimpl
    def on_launch(self, event):
        if self.dump is not None:
            self.dump.collector.launched(event)

    @hookimpl
    def after_run(self, run, results):
        if self.dump is None:
            return
        try:
            summary = self.dump.write(f"run {run.status}")
            run.meta["ir_dump"].update(summary or {})
            if self.dump.collector.unmatched_launches:
                run.log.warning(f"ir_dump: {self.dump.collector.unmatched_launches} launches could not be matched "
                                "to a compiled variant (compiled before the run started?)")
        finally:
            self.dump.guard.remove()
            self.dump = None

    # ------------------------------------------------------------------ campaigns and comparisons
    @hookimpl
    def campaign_guards(self, campaign, ops):
        return campaign_mod.guard_lines(campaign, ops)

    @hookimpl
    def ir_status(self, a_dir, b_dir):
        return campaign_mod.ir_status(a_dir, b_dir)

    @hookimpl
    def campaign_split_item(self, item, dest, shapes, link):
        return campaign_mod.split_ir(item, dest, shapes, link)


def add_ir_argument(parser, help: str = "IR kinds to dump per launched variant, comma-separated: ttir,ttgir,llir,"
                                        "ptx (and what the backend adds, e.g. cubin, amdgcn), or 'all' (default: "
                                        "ttgir)") -> None:
    """``--ir KINDS`` (declared here only: the run option's, and ``zlf ir``'s)."""
    parser.add_argument("--ir", metavar="KINDS", default=None, help=help)
