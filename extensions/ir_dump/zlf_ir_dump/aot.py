"""Compile the ops' kernels for a GPU target on this machine (no GPU needed) and dump their IR.

``zlf ir [OP ...] --target cuda:90 [--out PARENT]`` runs every point's function once through
Triton's real JIT path with a fake driver for the target (see :mod:`zlf_ir_dump.fake_driver`):
binding, specialization, autotuning and compilation happen as on the GPU, launches run nothing.
The IR lands in a new run directory as the same ``ir/`` tree ``zlf run --ext ir_dump`` writes.

Without a device the autotuner cannot time configs: every config is compiled (listed as sweep
losers in index.tsv) and the first one is taken as the winner, the same on every side.
"""
from __future__ import annotations

import json
import os
import sys
import traceback

from tabulate import tabulate
from zlf import Backend, UsageError
from zlf_ir_dump.irtree import IR_DIR, read_index
from zlf.ops import point_inputs, triton_interpreting
from zlf.redact import redact_text
from zlf.rundir import RunDir, disk_full, write_atomic
from zlf.run import relevant_environment
from zlf.session import shapes_by_op

from .collector import LAUNCHED, IrDump, parse_kinds
from .fake_driver import parse_target

#: IR kinds each target backend's compiler produces.
TARGET_IR_KINDS = {"cuda": ("ttir", "ttgir", "llir", "ptx", "cubin"), "hip": ("ttir", "ttgir", "llir", "amdgcn", "hsaco")}


class AotBackend(Backend):
    """Planning-only backend: GPU shapes and dtypes, host tensors, a target that is not here."""

    name = "aot"
    description = "ahead-of-time compile for a GPU target; nothing runs"
    host_timing = False

    def __init__(self, target):
        super().__init__(0)
        self.target = target
        self.triton_target = target.backend
        self.ir_kinds = TARGET_IR_KINDS.get(target.backend, ("ttir", "ttgir", "llir"))


def configure_parser(p) -> None:
    from zlf.options import add_dtype_argument

    from .plugin import add_ir_argument

    p.add_argument("ops", nargs="*", metavar="OP",
                   help="built-in op (add, softmax, matmul), FILE.py[::NAME], or a name an extension knows; default: the built-in suite")
    p.add_argument("--target", default="cuda:90", metavar="BACKEND:ARCH",
                   help="GPU target to compile for: cuda:80, cuda:90, cuda:100, hip:gfx942 ... (default cuda:90)")
    add_dtype_argument(p, "dtype(s) instead of each op's GPU defaults")
    add_ir_argument(p, "IR kinds, comma-separated (ttir,ttgir,llir,ptx,cubin; 'all'); default: ttgir")
    p.add_argument("--out", default="runs", metavar="PARENT", help="parent of the run directory (default: runs/)")
    p.add_argument("--name", metavar="LABEL", help="run directory label (default: ir_<op> or ir_suite)")


def _split(values) -> list:
    return [d.strip() for v in values or () for d in v.split(",") if d.strip()]


def _interpreted_triton() -> bool:
    """Whether ``triton.language`` is imported in this process with the interpreter on (the cpu
    backend, or anything that imported Triton with ``TRITON_INTERPRET`` set): its functions are
    interpreted for good, and no GPU compile accepts them."""
    standard = sys.modules.get("triton.language.standard")
    if standard is None:
        return False
    from triton.runtime.jit import JITFunction

    return not isinstance(getattr(standard, "cdiv", None), JITFunction)


#: set in the environment of the fresh process :func:`_in_a_fresh_process` starts, to the starting
#: process's id: only its own child takes it as "this is the fresh process" (an inherited value
#: from a caller's environment names another process).
FRESH = "ZLF_IR_FRESH_PROCESS"


def _is_the_fresh_process() -> bool:
    return os.environ.get(FRESH, "") == str(os.getppid())


def _in_a_fresh_process(session) -> int:
    """``zlf ir`` with the same arguments in a new Python process without ``TRITON_INTERPRET``:
    a process whose Triton is interpreted (an in-process ``zlf run --backend cpu`` before this
    command, or a caller that imported Triton with the variable set) cannot import it again
    compiled. ``-P``: the working directory is not put first on ``sys.path`` (a ``zlf.py`` there
    is no zlf). The caller's in-process extensions go along, pickled (:mod:`zlf_ir_dump.fresh`);
    one that cannot is one line here, before the process starts. Its output is passed on; an
    interrupt or SIGTERM is passed to it and waited for, so that it files what it compiled; its
    exit code is returned (128 + N for a signal N)."""
    import signal
    import subprocess

    from . import fresh

    try:
        sent = fresh.pack(session.extra_plugins) if session.extra_plugins else ""
    except ValueError as exc:
        raise UsageError(f"zlf ir compiles in a fresh process here (Triton is interpreted in this one) and cannot "
                         f"take along {exc}; pass a plugin that pickles, or run zlf ir before Triton is "
                         "imported interpreted") from exc
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env[FRESH] = str(os.getpid())
    # its own process group: a terminal's Ctrl-C reaches this process alone, which passes it on once
    child = subprocess.Popen([sys.executable, "-P", "-m", "zlf_ir_dump.fresh", *session.argv], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             process_group=0)
    try:
        out, err = child.communicate(sent.encode())
    except KeyboardInterrupt:
        child.send_signal(signal.SIGINT)
        out, err = child.communicate()
    _pass_on(out, sys.stdout)
    _pass_on(err, sys.stderr)
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


def _pass_on(data: bytes, stream) -> None:
    """The fresh process's output as it came (an op's or a compiler's bytes need not be UTF-8):
    to ``stream``'s bytes; to a stream of text alone (a StringIO), decoded with replacements."""
    if not data:
        return
    binary = getattr(stream, "buffer", None)
    if binary is None:
        stream.write(data.decode(errors="replace"))
        return
    stream.flush()
    binary.write(data)
    binary.flush()


def _check_triton_cache() -> None:
    """Triton writes every compiled kernel to its cache: a cache directory that cannot be made or
    written is one line here, not one NotADirectoryError per point in a run directory."""
    try:
        from triton import knobs

        where = knobs.cache.dir
    except (ImportError, AttributeError):  # a Triton before 3.4: no knobs, the same default
        where = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    name = "TRITON_CACHE_DIR" if os.environ.get("TRITON_CACHE_DIR") else "the Triton cache (TRITON_CACHE_DIR unset)"
    try:
        os.makedirs(where, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{name} {where!r} cannot be made: {exc.strerror or exc}") from exc
    if not os.access(where, os.W_OK | os.X_OK):
        raise UsageError(f"{name} {where!r} is not writable")


def main(args, session) -> int:
    if _interpreted_triton():
        if not _is_the_fresh_process():
            return _in_a_fresh_process(session)
        raise UsageError("Triton was imported interpreted at start-up of a fresh process without TRITON_INTERPRET "
                         "(an extension, a .pth file or sitecustomize sets it): no GPU compile is possible")
    # The interpreter would turn every kernel into an InterpretedFunction at decoration time,
    # Triton's own among them. Held at "0" (not removed) while the command runs, so that an op
    # file's os.environ.setdefault("TRITON_INTERPRET", "1") leaves it off; given back after.
    interpret = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        try:
            target = parse_target(args.target)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        from triton.runtime import driver

        from . import fake_driver

        previous = driver._active  # None until Triton picks its own driver (lazily)
        fake = fake_driver.activate(target=target)
        try:
            return _compile(args, session, target, interpret)
        finally:
            # The fake driver goes, with what it made: a later command in this process compiles,
            # tunes and launches on Triton's own driver.
            fake_driver.deactivate(fake, previous)
    finally:
        if interpret is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = interpret


def _compile(args, session, target, interpret) -> int:
    from zlf import compiler_hooks

    backend = AotBackend(target)
    session.backend = backend
    ops = session.resolve_ops(args.ops)
    if triton_interpreting():
        raise UsageError(f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '')} was set while the ops were "
                         "imported (by an op file): their kernels are interpreted, none compiles for a GPU target; "
                         "remove that line (zlf run --backend cpu interprets kernels)")
    _check_triton_cache()
    plan = session.plan(ops, _split(args.dtype))
    if not plan:
        raise UsageError("nothing to compile: no shapes or dtypes left for the selected ops")
    from .preflight import check_target

    try:
        check_target(target, args.target)  # a target no compiler here knows: one line, nothing written
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    label = args.name or ("ir_" + (ops[0].name if len(ops) == 1 else "suite"))
    rundir = RunDir.create(args.out, label)
    rundir.reserve()  # given back for meta.json when the IR fills the disk
    rundir.write_shapes(shapes_by_op(plan))
    kinds = parse_kinds(args.ir, backend.ir_kinds)
    import triton

    meta = {
        "command": ["zlf", *session.argv],
        "kind": "ir",
        "target": args.target,
        "backend": backend.name,
        "triton": triton.__version__,
        "triton_path": os.path.dirname(triton.__file__),
        "ops": sorted({p.op.name for p in plan}),
        "points": len(plan),
        "ir_dump": {"kinds": list(kinds), "autotune": "no device: first config wins, every config compiled"},
        "environment": relevant_environment(prefixes=("TRITON_", "DISABLE_", "ENABLE_", "MLIR_", "LLVM_")),
    }
    meta["environment"].pop("TRITON_INTERPRET", None)  # held at "0" by this command
    if interpret:
        meta["ignored_environment"] = {"TRITON_INTERPRET": interpret}
    log_lines = []
    dump = IrDump(rundir.path / IR_DIR, kinds, note=log_lines.append)
    hooks = compiler_hooks.install(dump.collector.compiled, dump.collector.launched)
    dump.guard.install()
    errors = {}
    try:
        for planned in plan:
            op, point = planned.op, planned.point
            dump.collector.begin_point(point)
            try:
                inputs = point_inputs(op, point, backend)
                with hooks.launch_window(point.id):
                    op.fn(*inputs)
            except Exception as exc:  # one point's compile error is reported; the others go on
                errors[point.id] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                log_lines.append(f"point {point.id} raised:\n{traceback.format_exc().rstrip()}")
            finally:
                dump.collector.end_point()
    finally:
        hooks.remove()
        full = None
        try:
            summary = dump.write("end of compile")
        except OSError as exc:  # a full disk: nothing half-written is kept, and it is said once, here
            if not disk_full(exc):
                raise
            summary, full = None, exc
        finally:
            dump.guard.remove()
        meta["ir_dump"].update(summary or {})
        meta["errors"] = errors
        if full is not None:
            meta["status"] = "disk full"
            meta["error"] = f"{full.strerror or full} writing {full.filename or rundir.path / IR_DIR}"
        rundir.release()
        rundir.write_meta(meta)
        try:
            write_atomic(rundir.path / "run.log", redact_text("\n".join(log_lines)) + "\n")
        except OSError as exc:
            if not disk_full(exc):
                raise
    if full is not None:
        raise UsageError(f"{meta['error']}: the IR of {len(plan)} point(s) did not fit; "
                         f"meta.json in {rundir.path} says so (free space and run zlf ir again)")
    rows = {}
    for r in read_index(rundir.path / IR_DIR):
        if r["status"] == LAUNCHED:
            rows.setdefault((r["kernel"], r["shape"]), []).append(r["name"])
    table = [[shape, kernel, ", ".join(names)] for (kernel, shape), names in sorted(rows.items(), key=lambda kv: kv[0][0])]
    print(tabulate(table, headers=["shape", "kernel", f"files ({', '.join(kinds)})"]))
    for pid, err in errors.items():
        print(f"FAILED {pid}: {err}", file=sys.stderr)
    print(json.dumps(summary) if getattr(args, "json", False) else
          f"{summary['launched']} launched variants, {summary['sweep_losers']} sweep losers, target {args.target}")
    print(f"run dir: {rundir.path}")
    return 1 if errors else 0
