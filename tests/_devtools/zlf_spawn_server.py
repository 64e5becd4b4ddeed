"""A spawn server for this repository's test sessions: ``python zlf_spawn_server.py SOCKET [MODULE ...]``.

A test session of zlf and its extensions starts hundreds of Python processes (``zlf run`` under
``zlf ab``, task workers, sweep children), and each spends about two seconds importing torch
before it does anything. This server imports the slow, import-time-stateless modules once
(torch and the libraries zlf needs; nothing of zlf or matplotlib, whose import reads the
environment; Triton twice, once for interpreted and once for compiled kernels, see
:class:`TritonFlavours`) and forks a child for each request of a stand-in process
(``zlf_spawn_client.py``, the session's ``sitecustomize``). The child takes over the stand-in's
file descriptors, working directory, environment, umask, resource limits, signal state and
parent-death signal, and runs ``-m MODULE ARGS`` the way the interpreter would, including its exit
(threads joined, ``atexit`` run, streams flushed, an uncaught ``KeyboardInterrupt`` ending in SIGINT).

Requests that would not behave the same are refused (the stand-in then starts normally): other
process traits (``zlf_spawn_client.traits``: namespaces, cgroups, credentials, scheduling, memory
state), another interpreter, other interpreter flags or ``-X``/``-W`` options, another value of
an environment variable read when the preloaded modules are imported (:data:`IMPORT_TIME_ENV`),
or a ``sys.path`` on which a fresh process would find a module other than one the child has already: the server's
``sys.path`` with folders added (``PYTHONPATH``, and the working directory that ``-m`` puts
first) is served only when none of the added folders holds a module or package named like one
the server has imported, and the modules the stand-in loaded at start-up are the server's own.

Like the client, this file runs as a script and imports nothing of zlf. It serves until its
parent (the test session) exits.
"""
import collections
import json
import os
import selectors
import signal
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
#: environment variables (prefixes) whose value the preloaded modules read at import time, or
#: that change how Python itself starts: a request whose value differs from the server's starts
#: normally instead.
IMPORT_TIME_ENV = ("PYTHON", "LD_", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "OPENBLAS", "NUMPY", "LANG", "LC_",
                   "MALLOC", "GLIBC", "CUDA_MODULE_LOADING")
#: the modules imported once, here.
PRELOAD = ("torch", "numpy", "scipy.special", "scipy.stats", "yaml", "attr", "pluggy", "tabulate", "jsonschema")


#: Triton's modules imported twice, as a process with ``TRITON_INTERPRET`` set imports them and as
#: one without: ``@triton.jit`` reads that variable when it decorates, Triton's own functions
#: among them, so one import cannot serve both (:class:`TritonFlavours`).
TRITON_FLAVOURED = ("triton", "triton.experimental.gluon", "triton.runtime.interpreter")

_KEPT = []


#: ... less these, read when used, not at import (Ray sets PYTHONBREAKPOINT in its workers).
READ_WHEN_USED_ENV = ("PYTHONBREAKPOINT",)


def own_traits() -> dict:
    """This process's traits, as the stand-in reports its own (``zlf_spawn_client.traits``, the one
    definition: loaded from its copy beside this one, the session's ``sitecustomize.py``, never
    imported as a module of the server's)."""
    import importlib.util

    names = [os.path.join(HERE, name) for name in ("sitecustomize.py", "zlf_spawn_client.py")]
    spec = importlib.util.spec_from_file_location("zlf_spawn_traits", next(filter(os.path.exists, names), names[0]))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.traits()


def _provides(folder: str) -> set:
    """The top-level names ``folder`` would give a module on ``sys.path``: modules by their file
    suffixes, and every subfolder (a package, or a namespace portion)."""
    import importlib.machinery

    try:
        entries = os.listdir(folder)
    except OSError:
        return set()
    suffixes = sorted(importlib.machinery.all_suffixes(), key=len, reverse=True)
    names = set()
    for entry in entries:
        suffix = next((s for s in suffixes if entry.endswith(s)), None)
        names.add(entry[:-len(suffix)] if suffix else entry)
    return names


#: ... and this one, whose effect (the folders on ``sys.path``) :meth:`Server.path_refusal` checks.
PATH_ENV = "PYTHONPATH"

#: The one interpreter flag a child takes on itself, with its variable: whether imports write
#: bytecode (``-B``, ``PYTHONDONTWRITEBYTECODE``; zlf's children under a file-size limit write
#: none) matters only to what the child imports, and the child sets ``sys.dont_write_bytecode``
#: (``sys.flags`` keeps the server's value).
BYTECODE_ENV = "PYTHONDONTWRITEBYTECODE"
#: its place in ``list(sys.flags)`` (named there from Python 3.10, the fifth before)
BYTECODE_FLAG = getattr(type(sys.flags), "__match_args__", ("",) * 4 + ("dont_write_bytecode",)).index("dont_write_bytecode")


def _flags_view(flags: list) -> list:
    """``list(sys.flags)`` less the bytecode flag."""
    return [None if i == BYTECODE_FLAG else flag for i, flag in enumerate(flags)]


def _env_view(env: dict) -> dict:
    return {k: v for k, v in env.items()
            if k.startswith(IMPORT_TIME_ENV) and k not in READ_WHEN_USED_ENV and k not in (PATH_ENV, BYTECODE_ENV)}


class Child(collections.namedtuple("Child", "pid conn leader module")):
    """A forked child: its pid, the stand-in's connection, whether it leads its own session (and
    so is killed with its process group), and the module it runs (for the log)."""

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL) if self.leader else os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass


def _triton_python(name: str) -> bool:
    """A module of Triton's Python code; its native library (``triton._C``) loads once a process."""
    return (name == "triton" or name.startswith("triton.")) and not (name == "triton._C" or name.startswith("triton._C."))


class TritonFlavours:
    """A child's finder of ``triton``: the server imported Triton's Python modules twice, the way
    a process with ``TRITON_INTERPRET`` set imports them and the way one without does; when the
    child first imports ``triton``, the set its environment asks for then (read as Triton reads
    it) goes into ``sys.modules``, as if imported at that moment. Finding the spec decides nothing
    (``importlib.util.find_spec("triton")`` imports nothing): creating the module does."""

    def __init__(self, flavours: dict):
        self.flavours = flavours  # {interpreted: {module name: module}}
        self.chosen_spec = None

    def find_spec(self, name, path=None, target=None):
        if name != "triton" or not self.flavours:
            return None
        import importlib.machinery

        real = self.flavours[False]["triton"].__spec__
        spec = importlib.machinery.ModuleSpec("triton", self, origin=real.origin, is_package=True)
        spec.submodule_search_locations = list(real.submodule_search_locations or [])
        spec.cached, spec.has_location = real.cached, real.has_location
        return spec

    def create_module(self, spec):
        knobs = self.flavours[False].get("triton.knobs")
        if knobs is not None and hasattr(knobs, "runtime"):
            interpret = bool(knobs.runtime.interpret)
        else:  # Triton before its knobs module
            interpret = os.environ.get("TRITON_INTERPRET", "0") == "1"
        modules = self.flavours[interpret]
        self.flavours = {}
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for name, module in modules.items():
            if name != "triton":
                sys.modules.setdefault(name, module)
        self.chosen_spec = modules["triton"].__spec__
        return modules["triton"]

    def exec_module(self, module) -> None:
        module.__spec__ = self.chosen_spec  # imported already: only the spec the import set is put back


def listen(path: str) -> socket.socket:
    """The server's socket, listening: a stand-in that connects before the server serves waits
    in the backlog for its answer."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    return listener


class Server:
    def __init__(self, listener: socket.socket, path: str, own: dict, flavours: dict, parent: int):
        self.path = path
        self.own = own
        self.flavours = flavours
        self.listener = listener
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, ("accept", None))
        self.parent = parent  # the process it serves until it exits
        self.children = {}  # pidfd -> Child
        #: top-level names of every module a child has from the start
        self.imported = {name.partition(".")[0] for name in list(sys.modules)}

    def refusal(self, request: dict):
        argv = request.get("argv") or []
        if len(argv) < 3 or argv[1] != "-m" or argv[0] != request.get("executable"):
            return "not started as python -m MODULE"
        theirs, own = request.get("traits") or {}, self.own["traits"]
        for name in sorted(own):
            if theirs.get(name) != own[name]:
                return f"another {name}"
        for key in ("executable", "flags", "warnoptions", "xoptions"):
            theirs, own = request.get(key), self.own[key]
            if key == "flags" and isinstance(theirs, list):
                theirs, own = _flags_view(theirs), _flags_view(own)
            if theirs != own:
                return f"another {key}"
        theirs, own = _env_view(request.get("env") or {}), self.own["env"]
        if theirs != own:
            return "another import-time environment: " + " ".join(
                sorted(k for k in set(theirs) | set(own) if theirs.get(k) != own.get(k)))
        return self.path_refusal(request["path"], request["cwd"], request["loaded"])

    def path_refusal(self, path: list, cwd: str, loaded: dict):
        """Why a fresh process with ``path`` (and ``-m``'s ``cwd`` before it) could import a module
        other than the child's, or None. ``loaded``: the stand-in's modules and their files."""
        own = self.own["path"]
        if [p for p in path if p in own] != own:
            return "another path: the server's folders are not all there, in order"
        for name, origin in loaded.items():
            module = sys.modules.get(name)
            if name != "__main__" and module is not None and getattr(module, "__file__", None) != origin:
                return f"another path: module {name} from {origin}"
        names = self.imported - {name.partition(".")[0] for name in loaded}
        for folder in [p for p in path if p not in own] + ([] if sys.flags.safe_path else [cwd]):
            if os.path.exists(folder) and not os.path.isdir(folder):
                return f"another path: {folder} is no folder"
            shadowing = sorted(_provides(folder) & names)
            if shadowing:
                return f"another path: {folder} holds {shadowing[0]}"
        return None

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select(timeout=1.0):
                kind, data = key.data
                if kind == "accept":
                    conn, _ = self.listener.accept()
                    self.selector.register(conn, selectors.EVENT_READ, ("request", [bytearray(), []]))
                elif kind == "request":
                    self.on_request(key.fileobj, data)
                elif kind == "stand-in":
                    self.on_stand_in(key.fileobj, data)
                elif kind == "exit":
                    self.on_exit(key.fileobj)
            if os.getppid() != self.parent:
                self.stop()
                return

    def on_request(self, conn, data) -> None:
        buffer, fds = data
        try:
            chunk, got, _, _ = socket.recv_fds(conn, 1 << 20, 253)
        except OSError:
            chunk, got = b"", []
        buffer += chunk
        fds.extend(got)
        if chunk and b"\n" not in chunk:
            return  # more of the request to come
        self.selector.unregister(conn)
        if not chunk:
            self._close(conn, fds)
            return
        try:
            request = json.loads(bytes(buffer).partition(b"\n")[0])
            why = self.refusal(request) or (None if len(fds) == len(request["fds"]) else "descriptors lost")
        except (ValueError, KeyError, TypeError, AttributeError):  # not a stand-in's request
            self._close(conn, fds)
            return
        print(("refused" if why else "forked"), *request.get("argv", [])[2:3], why or "", flush=True, file=sys.stderr)
        if why:
            self._send(conn, {"refused": why})
            self._close(conn, fds)
            return
        # every signal held until the child has the stand-in's dispositions and mask: one passed
        # on at once (the stand-in may hold one already) must not meet the server's handlers
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        server = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:  # out of processes or memory: the stand-in starts on its own
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self._send(conn, {"refused": f"fork: {exc}"})
            self._close(conn, fds)
            return
        if pid == 0:
            try:
                self.selector.close()
                self.listener.close()
                for other in self.children.values():
                    other.conn.close()
                conn.close()
                _become(request, fds, self.flavours, server)
            except BaseException:  # the child's own failure, on the stand-in's stderr by now
                import traceback

                os.write(2, ("zlf spawn server: " + traceback.format_exc()).encode(errors="replace"))
            finally:
                os._exit(70)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = Child(pid, conn, request["leader"], request["argv"][2])
        self.selector.register(pidfd, selectors.EVENT_READ, ("exit", None))
        self.selector.register(conn, selectors.EVENT_READ, ("stand-in", pidfd))
        self._send(conn, {"pid": pid})

    def on_stand_in(self, conn, pidfd) -> None:
        """The stand-in sends nothing after its request: readable means it is gone. So is the child."""
        try:
            if conn.recv(1):
                return
        except OSError:
            pass
        self.selector.unregister(conn)
        self.children[pidfd].kill()

    def on_exit(self, pidfd) -> None:
        child = self.children.pop(pidfd)
        conn = child.conn
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status, usage = os.wait4(child.pid, 0)
        end = {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"code": os.waitstatus_to_exitcode(status)}
        # the child's CPU time (with its descendants it waited for): where a session's time goes
        print("ended", child.module, *end.values(), f"cpu {usage.ru_utime + usage.ru_stime:.2f} s",
              flush=True, file=sys.stderr)
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        self._send(conn, end)
        conn.close()

    def stop(self) -> None:
        for child in self.children.values():
            child.kill()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    @staticmethod
    def _send(conn, message: dict) -> None:
        try:
            conn.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            pass

    def _close(self, conn, fds) -> None:
        for fd in fds:
            os.close(fd)
        conn.close()


def _become(request: dict, received: list, flavours: dict, server: int) -> None:
    """In the forked child of the process ``server``: take over the stand-in's process state,
    then run the module."""
    import resource

    if flavours:
        sys.meta_path.insert(0, TritonFlavours(flavours))

    _die_with_server(request.get("death_signal") or 0, server)
    if request["leader"]:
        os.setsid()
    # descriptors: each received one to the number it had in the stand-in, and nothing else open.
    # First all of them above every target number, so that no dup2 overwrites a source.
    import fcntl

    floor = max(request["fds"], default=2) + 1
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in received]
    for target, fd in zip(request["fds"], high):
        os.dup2(fd, target, inheritable=True)
    keep = set(request["fds"])
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    for name, (soft, hard) in request["limits"].items():
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError, AttributeError):
            pass
    for name, how in request["dispositions"].items():
        signal.signal(getattr(signal, name), {"ignore": signal.SIG_IGN, "interrupt": signal.default_int_handler,
                                              "default": signal.SIG_DFL}[how])
    sys.dont_write_bytecode = bool(request["flags"][BYTECODE_FLAG])
    _run_module(request)


def _die_with_server(signum: int, server: int) -> None:
    """Take the stand-in's parent-death signal (``PR_SET_PDEATHSIG``; fork cleared the server's):
    its caller asked for ``signum`` when the process's parent dies, and this child's parent is
    the server. The stand-in still gets it when its own parent dies, and passes it on (or dies of
    it, and the server kills this child). A server gone before the call sends no signal, so it is
    sent here, as the kernel would have."""
    if not signum:
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signum, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != server:
        os.kill(os.getpid(), signum)


def _streams() -> None:
    """New sys.stdin/stdout/stderr on descriptors 0-2, made the way the interpreter makes them
    (the encoding and error handlers are the server's own: its flags and locale variables are the
    stand-in's)."""
    import io

    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))

    def stream(fd: int, like, writing: bool):
        try:
            os.fstat(fd)
        except OSError:
            return None
        raw = io.FileIO(fd, "wb" if writing else "rb", closefd=False)
        tty = raw.isatty()
        if writing:
            buffered = io.BufferedWriter(raw)
            line = fd == 2 or tty or unbuffered
        else:
            buffered, line = io.BufferedReader(raw), False
        encoding = getattr(like, "encoding", None) or "utf-8"
        errors = getattr(like, "errors", None) or ("backslashreplace" if fd == 2 else "strict")
        return io.TextIOWrapper(buffered, encoding=encoding, errors=errors, line_buffering=line,
                                write_through=unbuffered and writing)

    _KEPT.extend([sys.stdin, sys.stdout, sys.stderr])  # never finalised: each would close its descriptor
    sys.stdin = sys.__stdin__ = stream(0, sys.__stdin__, False)
    sys.stdout = sys.__stdout__ = stream(1, sys.__stdout__, True)
    sys.stderr = sys.__stderr__ = stream(2, sys.__stderr__, True)


def _report(exc: BaseException) -> None:
    """The traceback from runpy's frame on, as the interpreter shows it (not this file's frame)."""
    exc.__traceback__ = exc.__traceback__.tb_next
    sys.excepthook(type(exc), exc, exc.__traceback__)


def _run_module(request: dict) -> None:
    import atexit
    import runpy
    import threading
    import types

    _streams()
    argv = request["argv"]
    sys.orig_argv = list(argv)
    sys.argv = ["-m", *argv[3:]]
    sys.path[:] = ([] if sys.flags.safe_path else [os.getcwd()]) + list(request["path"])
    sys.modules["__main__"] = types.ModuleType("__main__")
    code = 0
    interrupted = False
    try:
        # the stand-in's mask: a signal held since the fork arrives now, as at the module's start
        signal.pthread_sigmask(signal.SIG_SETMASK, request["mask"])
        runpy._run_module_as_main(argv[2], alter_argv=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code & 0xFF
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt as exc:
        _report(exc)
        interrupted = True
    except BaseException as exc:
        _report(exc)
        code = 1
    try:
        threading._shutdown()
    except Exception:
        pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _preload() -> dict:
    """Import :data:`PRELOAD`, and Triton's flavours (:func:`_preload_triton`, returned). Where the
    session keeps bytecode under a prefix (``PYTHONPYCACHEPREFIX``, empty at a machine's first
    session until the session has linked the installation's bytecode into it), the server reads
    the installed packages' own bytecode instead of compiling them all again (about 5 s of CPU
    while the session waits for it), and writes nothing beside their sources."""
    import importlib

    prefix, dont_write = sys.pycache_prefix, sys.dont_write_bytecode
    if prefix:
        sys.pycache_prefix, sys.dont_write_bytecode = None, True
    try:
        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
        flavours = _preload_triton()
    finally:
        sys.pycache_prefix, sys.dont_write_bytecode = prefix, dont_write
    return flavours


def _preload_triton() -> dict:
    """Import :data:`TRITON_FLAVOURED` without ``TRITON_INTERPRET`` and with it; returns
    ``{interpreted: {name: module}}`` and leaves none of them in ``sys.modules`` (a child gets its
    set from :class:`TritonFlavours`), nor anything where Triton is missing or fails to import.
    The native library stays: loaded once, it is every flavour's (a second load would fail)."""
    import importlib

    saved = os.environ.get("TRITON_INTERPRET")
    flavours = {}
    try:
        for interpreted in (False, True):
            if interpreted:
                os.environ["TRITON_INTERPRET"] = "1"
            else:
                os.environ.pop("TRITON_INTERPRET", None)
            try:
                for name in TRITON_FLAVOURED:
                    importlib.import_module(name)
            except Exception:
                flavours = {}
            else:
                top = sys.modules["triton"]
                if "triton._C" in sys.modules and not hasattr(top, "_C"):
                    top._C = sys.modules["triton._C"]  # imported by the first flavour, not by this one
                flavours[interpreted] = {n: m for n, m in sys.modules.items() if _triton_python(n)}
            for name in [n for n in sys.modules if _triton_python(n)]:
                del sys.modules[name]
            if not flavours:
                break
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved
    return flavours


def main(argv) -> int:
    import gc

    # the parent, before the imports: one that dies meanwhile leaves this process adopted by
    # another, which a later look would take for the parent (and serve on for good)
    parent = os.getppid()
    path = argv[0]
    # what a request must match, taken before any import: sys.path as it was at start-up, less
    # this script's folder (put first because this runs as a script)
    own = {"executable": sys.executable, "path": sys.path[1:], "flags": list(sys.flags),
           "warnoptions": list(sys.warnoptions), "xoptions": repr(sorted(sys._xoptions.items())),
           "env": _env_view(os.environ), "traits": own_traits()}
    # listening before the imports: the session goes on starting its workers meanwhile, and a
    # stand-in that asks early waits for its answer instead of starting plainly
    listener = listen(path)
    print("listening", flush=True)
    flavours = _preload()
    # What the server holds now, every child holds too: frozen, the collector of a child never
    # walks it (which cost a child ~0.15 s of CPU and twice the page copies, triton's import
    # hardest hit); the pattern the gc module's documentation gives for servers that fork.
    gc.collect()
    gc.freeze()
    server = Server(listener, path, own, flavours, parent)
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
