"""Sandbox escapes, probed from the candidate's process: each probe prints
``PROBE <name>: escaped <detail>`` or ``PROBE <name>: held <detail>`` on its stdout (the worker's
log). The candidate computes honestly; the test reads the log. ``$ZLF_CHEAT_DIR`` is a folder of
the test's (outside the sandbox): a probe that writes there escaped."""
import glob
import os
import site
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

from _a import spec

CHEAT = Path(os.environ.get("ZLF_CHEAT_DIR", "/nonexistent"))


def say(name, escaped, detail=""):
    print(f"PROBE {name}: {'escaped' if escaped else 'held'} {detail}".rstrip(), flush=True)


def try_write(path: Path) -> bool:
    try:
        with open(path, "a") as f:
            f.write("")
        return True
    except OSError:
        return False


def probe_proc():
    seen = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            args = cmd.split(b"\0")
            if b"zlf_taskpkg.checker" in args or any(a.endswith((b"/pytest", b"/zlf")) for a in args) \
                    or b"execnet" in cmd or args[:2] == [b"zlf", b"task"]:
                seen.append(pid)
    say("proc", bool(seen), f"judge-side processes visible: {seen}")


def probe_writes():
    s = spec()
    targets = {
        "write_package": [Path(s["package"]) / "problem.py", Path(s["package"]) / "planted.py"],
        "write_site": [Path(d) / "sitecustomize_atk41.pth" for d in site.getsitepackages()]
                      + [Path(site.getusersitepackages()) / "usercustomize.py"],
        "write_home": [Path(os.path.expanduser("~")) / ".atk41_planted"],
        "write_rundir": [Path(s["run_dir"]) / "results.jsonl", Path(s["run_dir"]) / "meta.json",
                         Path(s["run_dir"]) / "task" / "worker.json", Path(s["run_dir"]) / "task" / "config.json",
                         Path(s["run_dir"]) / "task" / "checker-case1.log"],
        "write_tmp": [Path("/tmp") / "atk41_planted", Path("/var/tmp") / "atk41_planted", CHEAT / "planted"],
        "write_zlf_cache": [Path(os.path.expanduser("~")) / ".cache" / "zlf" / "atk41_planted"],
    }
    for name, paths in targets.items():
        hit = [str(p) for p in paths if try_write(p)]
        say(name, bool(hit), str(hit))


def probe_net():
    ok = []
    for addr in (("127.0.0.1", 22), ("1.1.1.1", 53), ("8.8.8.8", 53)):
        try:
            socket.create_connection(addr, timeout=1).close()
            ok.append(addr)
        except OSError as exc:
            # a refusal from an outside address means a route out; the sandbox's own loopback refuses too
            if isinstance(exc, ConnectionRefusedError) and addr[0] != "127.0.0.1":
                ok.append(addr)
    ifaces = socket.if_nameindex()
    say("net", bool(ok) or any(name != "lo" for _, name in ifaces), f"reached {ok}; interfaces {ifaces}")


def probe_fds():
    leaked = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and not target.startswith(("/dev/null", "/dev/shm", "/proc")) \
                and "scratch" not in target and "/task/worker" not in target and os.path.isfile(target):
            try:
                os.write(int(fd), b"")
                leaked.append(target)
            except OSError:
                pass
    say("fds", bool(leaked), f"writable files inherited: {leaked}")


def probe_shm():
    mine = set(os.listdir("/dev/shm"))
    others = [p for p in glob.glob("/run/shm/*") + glob.glob("/dev/shm/../shm/*")
              if os.path.basename(p) not in mine]
    hosts = [p for p in glob.glob("/proc/*/root/dev/shm/*") if os.path.basename(p) not in mine]
    say("shm", bool(others or hosts), f"{others[:5]} {hosts[:5]}")


def probe_userns():
    """A nested user namespace may remount the read-only binds writable."""
    pkg = Path(spec()["package"])
    target = CHEAT / "userns_planted"
    cmd = ("mount -o remount,bind,rw / 2>/dev/null; mount --bind / /mnt 2>/dev/null; "
           f"touch {target} 2>/dev/null; touch {pkg}/userns_planted 2>/dev/null; true")
    try:
        subprocess.run(["unshare", "-Urm", "sh", "-c", cmd], timeout=20, capture_output=True)
    except (OSError, subprocess.SubprocessError):
        pass
    hit = [str(p) for p in (target, pkg / "userns_planted") if p.exists()]
    say("userns", bool(hit), str(hit))


def probe_spawn_server():
    """A test session's spawn server (a unix socket in /tmp) forks Python processes outside."""
    # only the test session's own server (named by the test): never another user's
    socks = [p for p in [os.environ.get("ATK41_SPAWN_SOCKET")] if p]
    target = CHEAT / "spawn_planted.zip"
    for sock in socks:
        env = {**os.environ, "ZLF_SPAWN_SERVER": sock}
        try:
            subprocess.run([sys.executable, "-m", "zipfile", "-c", str(target), "/proc/self/status"],
                           env=env, timeout=60, capture_output=True, cwd="/")
        except (OSError, subprocess.SubprocessError):
            pass
    say("spawn_server", target.exists(), f"sockets {socks}")


def probe_survivor():
    """A grandchild that leaves the worker's process tree by setsid and double fork, then keeps
    trying to write outside for 20 s."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            end = time.time() + 20
            while time.time() < end:
                try_write(CHEAT / "survivor_wrote")
                time.sleep(0.05)
            os._exit(0)
        os._exit(0)
    os.wait()
    say("survivor", False, "started")


for probe in (probe_proc, probe_writes, probe_net, probe_fds, probe_shm, probe_userns, probe_spawn_server,
              probe_survivor):
    try:
        probe()
    except Exception as exc:  # a probe that cannot run held
        say(probe.__name__[6:], False, f"probe failed: {exc!r}")


def run_kernel(a, b, out, n):
    torch.add(a, b, out=out)
