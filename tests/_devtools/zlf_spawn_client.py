"""The client half of this repository's test-session spawn server (``zlf_spawn_server.py`` in
this folder), copied as the ``sitecustomize`` of the Python processes a test session starts.

This file is copied, not imported: Python runs it at start-up, before ``-m MODULE``
runs, and it must cost next to nothing. It imports nothing of zlf's and only standard modules.

When ``ZLF_SPAWN_SERVER`` names a socket and this process was started exactly as
``python -m MODULE ARGS``, it hands itself to the server: the server forks a child of its own
(which has torch imported already) that takes over this process's file descriptors, working
directory, environment, umask, resource limits, signal dispositions and mask, and parent-death
signal, and runs ``MODULE ARGS``. This process stays as its stand-in: it passes on the signals it
gets, and it exits the way the child exits (the same code, or killed by the same signal). When it
dies, the server kills the child. Whatever does not match the server (another interpreter, other
flags, other import-time environment variables, a ``sys.path`` on which this process could find
another module than the server's, other namespaces, cgroups, root, credentials, security state,
scheduling or memory state: :func:`traits`) is refused, and this process starts normally, as does
any process when the server cannot be reached.
"""
import os
import sys

_ENV = "ZLF_SPAWN_SERVER"
#: signals passed on to the child (SIGKILL and SIGSTOP cannot be caught: the server kills the
#: child when this process dies).
_FORWARD = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")
#: the dispositions the child takes over.
_DISPOSITIONS = _FORWARD + ("SIGPIPE", "SIGCHLD", "SIGXFSZ", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGWINCH")


def _request(sock_fd: int) -> dict:
    import resource
    import signal

    fds = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd == sock_fd:
            continue
        try:
            os.fstat(fd)  # the listing's own descriptor is closed by now
        except OSError:
            continue
        fds.append(fd)
    dispositions = {}
    for name in _DISPOSITIONS:
        handler = signal.getsignal(getattr(signal, name))
        dispositions[name] = ("ignore" if handler is signal.SIG_IGN else
                              "interrupt" if handler is signal.default_int_handler else "default")
    limits = {name: resource.getrlimit(getattr(resource, name))
              for name in dir(resource) if name.startswith("RLIMIT_")}
    umask = os.umask(0o22)
    os.umask(umask)
    return {
        "executable": sys.executable, "argv": list(sys.orig_argv), "path": list(sys.path),
        "loaded": {name: getattr(module, "__file__", None) for name, module in list(sys.modules.items())},
        "flags": list(sys.flags), "warnoptions": list(sys.warnoptions), "xoptions": repr(sorted(sys._xoptions.items())),
        "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask, "fds": fds,
        "leader": os.getsid(0) == os.getpid(), "dispositions": dispositions,
        "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])), "limits": limits,
        "traits": traits(), "death_signal": death_signal(),
    }


#: the lines of /proc/self/status a child forked from the server would take from the server
STATUS_TRAITS = ("Uid", "Gid", "Groups", "NoNewPrivs", "Seccomp", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
#: ioprio_get(2)'s number where Python has no call for it
IOPRIO_GET = {"x86_64": 252, "aarch64": 31}
#: prctl(2)'s options read here (linux/prctl.h)
PR_GET_PDEATHSIG, PR_GET_SECUREBITS, PR_GET_THP_DISABLE = 2, 27, 42


def traits() -> dict:
    """What a child forked from the server would take from the server instead of from this
    process: its namespaces, cgroups, root directory, credentials and capabilities, security state
    (no_new_privs, seccomp, securebits), scheduling (nice, CPU affinity, policy, I/O priority, OOM
    score, timer slack, personality) and memory state (transparent huge pages disabled, the core
    dump filter). A request whose traits differ from the server's is refused: a process its caller
    put in a sandbox or a cgroup, under setpriv, nice or taskset starts where it was put.

    The parent-death signal is no trait: fork clears it, so a child never has the server's; the
    child takes this process's (:func:`death_signal`) instead."""
    found = {}
    for name in ("mnt", "pid", "net", "ipc", "uts", "user", "cgroup", "time"):
        found["ns " + name] = _quietly(os.readlink, f"/proc/self/ns/{name}")
    found["root"] = _root()
    try:
        with open("/proc/self/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in STATUS_TRAITS:
                    found[key] = value.split()
    except OSError:
        pass
    for name in ("oom_score_adj", "timerslack_ns", "personality", "coredump_filter"):
        found[name] = _quietly(lambda path: open(path).read().strip(), f"/proc/self/{name}")
    # every hierarchy's group (paths are relative to the cgroup namespace, compared above)
    found["cgroup"] = _quietly(lambda path: open(path).read().split(), "/proc/self/cgroup")
    found["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
    found["affinity"] = sorted(os.sched_getaffinity(0))
    found["scheduler"] = os.sched_getscheduler(0)
    libc = _libc()
    number = IOPRIO_GET.get(os.uname().machine)
    if number is not None:
        found["ioprio"] = libc.syscall(number, 1, 0)  # IOPRIO_WHO_PROCESS, self
    found["thp_disable"] = libc.prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0)  # kept across fork and exec
    found["securebits"] = libc.prctl(PR_GET_SECUREBITS, 0, 0, 0, 0)
    return found


def death_signal() -> int:
    """This process's parent-death signal (``PR_SET_PDEATHSIG``; 0 for none): what its caller asked
    for when this process's parent dies. Not compared: fork clears it, so the server's own is
    never a child's, and zlf starts its workers with one (refusing them would start them all
    plainly). The child sets it on itself and gets it when its parent, the server, dies; this
    process still gets it when its own parent dies, and passes it on or dies of it (and the
    server kills the child)."""
    import ctypes

    found = ctypes.c_int(0)
    if _libc().prctl(PR_GET_PDEATHSIG, ctypes.byref(found), 0, 0, 0) != 0:
        return 0
    return found.value


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _root() -> list:
    """The root directory: its device and inode, and the mount it is on (a chroot into a bind
    mount of / has the same inode on another mount)."""
    fd = os.open("/", os.O_RDONLY)
    try:
        info = os.fstat(fd)
        mount = _quietly(lambda path: [line.split()[1] for line in open(path) if line.startswith("mnt_id:")],
                         f"/proc/self/fdinfo/{fd}")
        return [info.st_dev, info.st_ino, mount]
    finally:
        os.close(fd)


def _quietly(read, path):
    try:
        return read(path)
    except OSError:
        return None


def _read(sock, buffer: bytearray, wake=None):
    """The next line from the server, or None when it is gone. ``wake``: the read end of the
    signal wake-up pipe (:func:`_wait_for_end`), waited on beside the socket."""
    import json
    import select

    while b"\n" not in buffer:
        if wake is not None:
            ready = select.select([sock, wake], [], [])[0]
            if wake in ready:
                try:
                    os.read(wake, 512)
                except OSError:
                    pass
            if sock not in ready:
                continue  # a signal: its handler has run by now, or runs at the loop's next turn
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return json.loads(line)


def _wait_for_end(sock, buffer: bytearray, mask) -> dict:
    """Restore the signal ``mask`` and wait for the server's word of how the child ended.

    A handler of this process's runs between bytecodes, once its signal has interrupted a
    system call or when the interpreter next checks: one that lands just before the wait's
    system call begins would wait with it, and the signal would never be passed on. So the
    signal also writes to a wake-up pipe that the wait watches beside the socket."""
    import signal

    wake, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    end = None
    while end is None:
        try:
            end = _read(sock, buffer, wake) or {"code": 70}
        except OSError:
            end = {"code": 70}
    return end


def _hand_off() -> None:
    import json
    import signal
    import socket

    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(os.environ[_ENV])
    except OSError:
        return
    request = _request(sock.fileno())
    data = json.dumps(request).encode() + b"\n"
    # A signal that comes while this process waits for its answer (the server may still be
    # importing) is held: passed on to the child once there is one, or taken as this process
    # would take it at start-up when it starts normally.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, [getattr(signal, name) for name in _FORWARD])
    try:
        sent = socket.send_fds(sock, [data], request["fds"])
        sock.sendall(data[sent:])
        buffer = bytearray()
        reply = _read(sock, buffer)
    except OSError:
        reply = None
    if not reply or "pid" not in reply:  # refused, or the server is gone: start normally
        sock.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return
    pid = reply["pid"]

    def forward(signum, frame):
        try:
            if request["leader"]:
                os.killpg(pid, signum)
            else:
                os.kill(pid, signum)
        except OSError:
            pass

    # every one, those this process ignores too: the child starts with the same dispositions but
    # may install a handler of its own (zlf run's parent takes SIGHUP, even under nohup), and one
    # it still ignores is ignored there, as this process would have done
    for name in _FORWARD:
        signal.signal(getattr(signal, name), forward)
    end = _wait_for_end(sock, buffer, held)
    if end.get("signal"):
        for name in _FORWARD:
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [end["signal"]])
        os.kill(os.getpid(), end["signal"])
    os._exit(end.get("code", 70))


if os.environ.get(_ENV) and len(getattr(sys, "orig_argv", ())) >= 3 and sys.orig_argv[1] == "-m":
    _hand_off()
