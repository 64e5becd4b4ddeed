"""Where work units run: one worker process per GPU of this host (``--gpus``), or Ray tasks that
each ask for one GPU (``--executor ray``). docs/scale.md describes both.

An executor takes a *job* and a :class:`~zlf.scheduler.Scheduler`. The job is the campaign (or the
sharded ``zlf run``) seen through a few methods, all called in the driver's main thread, so the
state on disk has one writer:

* ``root`` -- the directory run specs are relative to; ``spec(key)`` -- a run spec
  (:meth:`zlf.ab.execute.Execution.run_spec`);
* ``skip(unit)`` -- a reason not to run the unit any more (its op failed; the job files its runs
  as skipped), or None;
* ``started(key, worker)``, ``finished(key, outcome, worker) -> bool`` (False: the run failed,
  the rest of its unit is not run), ``skipped(keys, reason)``, ``lost(unit)`` (its runs are
  pending again), ``discard(key)`` (remove a run's old output before results are written back),
  ``identity(key)`` -- the device a finished run measured on, ``note(text)`` -- a progress line.

A run is always a separate ``zlf`` process (:func:`execute_spec`); a worker only
starts them one after another, pinned to its GPU with the backend's visible-devices variable. A
failed run ends its unit, except a spec marked ``shared`` (a campaign's process of several ops,
whose failed op is re-run alone later) or ``goes_on`` (a library campaign's run: the other side of
its round runs whatever this one did, to tell a failure on B only from one on both).
"""
from __future__ import annotations

import datetime as _dt
import io
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from .procs import Terminated, die_with_parent, is_private_dir, python_child_env
from .config import parse_gpus  # noqa: F401  (parsed with the run's options)
from .errors import UsageError
from .redact import redact_text
from .rundir import RunDir, inside, safe_name

#: placeholder for the job's root directory in a run spec (replaced where the run executes).
ROOT = "{campaign}"

EXECUTORS = ("local", "ray")
DEFAULT_RETRIES = 1
#: how long a worker gets to exit after its input is closed.
STOP_GRACE_S = 10.0


def goes_on(spec: dict) -> bool:
    """Whether the rest of a unit runs after this spec's run failed (see the module's docstring)."""
    return bool(spec.get("shared") or spec.get("goes_on"))


# ----------------------------------------------------------------------------- command line
def add_scale_arguments(parser) -> None:
    """``--gpus`` and friends, shared by ``zlf run`` and ``zlf ab``."""
    g = parser.add_argument_group("scale out (docs/scale.md)")
    add_gpus_argument(g)
    g.add_argument("--executor", choices=EXECUTORS, default=None,
                   help="local worker processes (default with --gpus) or ray tasks of one GPU each")
    g.add_argument("--ray-address", metavar="ADDR",
                   help="Ray cluster to use (default: start a local one with the --gpus count as its GPUs)")
    from .options import number_type

    g.add_argument("--retries", type=number_type("--retries"), default=None, metavar="N",
                   help=f"times a unit whose worker or node died is run again elsewhere (default {DEFAULT_RETRIES})")


def add_gpus_argument(parser, help: str = "one worker per GPU, e.g. 0,1,2,3 (each pinned with the backend's "
                                          "visible-devices variable)") -> None:
    """``--gpus LIST`` (declared here only: ``zlf run``'s and ``zlf ab``'s, and a command's that
    spreads its own processes over GPUs)."""
    parser.add_argument("--gpus", metavar="LIST", help=help)


def pin_variable(session, backend_name: Optional[str]) -> Optional[str]:
    """The visible-devices variable of the backend the runs will use (never set up here: the
    driver must not hold a GPU)."""
    from .session import select_backend

    cls = select_backend(session.backends(), backend_name, check=False)
    return cls.visible_devices_env if cls is not None else None


def make_executor(executor: Optional[str], gpus: list, pin_env: Optional[str], retries: Optional[int],
                  ray_address: Optional[str] = None):
    retries = DEFAULT_RETRIES if retries is None else retries  # in range: RunConfig.check
    if (executor or "local") == "ray":
        return RayPool(ray_address, gpus, pin_env, retries)
    if ray_address:
        raise UsageError("--ray-address needs --executor ray")
    return LocalPool(gpus, pin_env, retries)


# ----------------------------------------------------------------------------- one run spec
def device_identity(run_dir: Path) -> str:
    """The device a run measured on, from its meta.json: uuid, else PCI bus id, else the name
    (two GPUs of one model still differ by a few percent)."""
    fp = RunDir(run_dir).meta().get("fingerprint") or {}
    return str(fp.get("uuid") or fp.get("pci.bus_id") or fp.get("device_name") or "")



def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def environment(overrides: dict) -> dict:
    env = python_child_env(os.environ)
    env.update(overrides)
    env.pop("FORCE_COLOR", None)
    return env


def _place(text: str, root: str) -> str:
    return text.replace(ROOT, root)


def execute_spec(spec: dict, root, extra_env: Optional[dict] = None) -> dict:
    """Run one run spec under ``root`` (the campaign directory, or a scratch folder on a Ray
    node): a fresh process whose output goes to the spec's log; its run directory is moved from
    the staging folder to ``dir`` once the process has exited.

    :return: ``{"key", "rc", "made", "started", "finished", "seconds", "log"}`` (JSON-able).
    Raises KeyboardInterrupt after stopping the process when the user interrupts.
    """
    root = Path(root)
    # campaign.json is a file anyone can edit: its paths must not lead out of the campaign
    # (the old output at ``dir`` is removed before the run).
    staging, final, log = (inside(root, root / spec[k]) for k in ("staging", "dir", "log"))
    for p in (staging, final):
        if p.exists():
            shutil.rmtree(p, ignore_errors=True)
    staging.mkdir(parents=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = list(spec["argv"])
    if spec.get("config"):  # the run's configuration file: what an earlier run of the unit wrote by now decides
        argv += ["--config", str(run_config_file(spec, root))]
    cmd = [_place(a, str(root)) for a in argv]
    env = environment({k: _place(v, str(root)) for k, v in {**spec["env"], **(extra_env or {})}.items()})
    started, t0 = _now(), time.monotonic()
    with open(log, "w") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        # SIGKILL when this process dies (a run stuck in a C call would not act on SIGTERM; what it
        # leaves --resume discards); a `zlf task` run's worker dies with it in turn.
        proc = subprocess.Popen(cmd, cwd=spec["cwd"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent(signal.SIGKILL))
        try:
            rc = proc.wait()
        except KeyboardInterrupt as exc:
            _stop(proc, exc)
            raise
    made = [p for p in staging.iterdir() if p.is_dir()] if staging.is_dir() else []
    if made:
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(made[0], final)
    shutil.rmtree(staging, ignore_errors=True)
    return {"key": spec["key"], "rc": rc, "made": bool(made), "name": made[0].name if made else None,
            "started": started, "finished": _now(),
            "seconds": round(time.monotonic() - t0, 2), "log": spec["log"]}

def _placed(value, root: str):
    if isinstance(value, str):
        return _place(value, root)
    if isinstance(value, (list, tuple)):
        return [_placed(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _placed(v, root) for k, v in value.items()}
    return value


def config_of(base, changes: dict, if_exists, root):
    """``base`` (a :class:`~zlf.config.RunConfig`) with a run spec's ``changes`` (``{"options":
    {owner: {dest: value}}, "extensions": [...]}``) and those of its ``if_exists`` items whose
    ``path`` exists under ``root``; ``{campaign}`` in a value is ``root``."""
    root = Path(root)
    config = base
    for item in [changes, *(i for i in if_exists or () if (root / i["path"]).exists())]:
        config = config.with_options(_placed(item.get("options") or {}, str(root)))
        config = config.selecting(item.get("extensions") or ())
    return config


def run_config_file(spec: dict, root) -> Path:
    """The configuration file a spec's run gets (``--config``): the spec's ``config["base"]``
    file, or, when the run needs something changed in it, ``config["file"]`` written from it."""
    from .config import RunConfig

    root = Path(root)
    c = spec["config"]
    base = inside(root, root / c["base"])
    config = RunConfig.read(base)
    changed = config_of(config, c, spec.get("if_exists"), root)
    if changed == config:
        return base
    return changed.write(inside(root, root / c["file"]))


def _stop(proc, exc: BaseException) -> None:
    """Stop a run this process was waiting for: Ctrl-C reached it too (same process group);
    SIGTERM reached this process only, so it is passed on. Killed if it does not stop."""
    try:
        if isinstance(exc, Terminated):
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        proc.wait()



# ----------------------------------------------------------------------------- one worker process
def worker_main(stdin=None, stdout=None) -> int:
    """Body of ``python -m zlf.executors``: read units (JSON lines), run their specs in order,
    report each start and outcome. A failed run ends its unit (the op has failed)."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout

    def say(event: dict) -> None:
        stdout.write(json.dumps(event) + "\n")
        stdout.flush()

    say({"event": "hello", "pid": os.getpid(), "host": socket.gethostname()})
    for line in stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        for spec in msg["runs"]:
            say({"event": "start", "key": spec["key"]})
            outcome = execute_spec(spec, msg["root"])
            say({"event": "outcome", "key": spec["key"], "outcome": outcome})
            if outcome["rc"] != 0 and not (goes_on(spec) and not interrupted(outcome)):
                break  # a shared process's failed op is re-run alone later; the unit goes on
        say({"event": "unit_done", "unit": msg["unit"]})
    return 0


def interrupted(outcome: dict) -> bool:
    """The run was stopped by Ctrl-C (SIGINT) or SIGTERM, not failed: it is pending again, its op has not failed."""
    return outcome.get("rc") in (130, 143, -signal.SIGINT, -signal.SIGTERM)


class _UnitTally:
    def __init__(self, unit):
        self.unit = unit
        self.reported: list = []
        self.seconds = 0.0
        self.failed = 0
        self.interrupted = False

    def add(self, key: str, outcome: dict, ok: bool) -> None:
        self.reported.append(key)
        self.seconds += outcome.get("seconds") or 0.0
        if interrupted(outcome):
            self.interrupted = True
        else:
            self.failed += 0 if ok else 1

    def finish(self, job, scheduler, worker: str) -> None:
        rest = [k for k in self.unit.keys if k not in self.reported]
        if rest and self.interrupted:
            # not a failure: the rest stays pending, and the campaign stops short of a report
            job.note(f"{self.reported[-1]} was interrupted; {', '.join(rest)} not run (--resume runs them)")
        elif rest:
            job.skipped(rest, f"{self.reported[-1]} failed")
        identity = next((job.identity(k) for k in self.reported if job.identity(k)), "")
        scheduler.done(self.unit.id, worker, round(self.seconds, 2), len(self.reported), self.failed, identity)


class _Slot:
    """One GPU of this host: its worker process, the unit it runs, how often it died."""

    def __init__(self, gpu: str):
        self.gpu = gpu
        self.proc: Optional[subprocess.Popen] = None
        self.generation = 0
        self.tally: Optional[_UnitTally] = None
        self.deaths = 0
        self.pid = None


class LocalPool:
    """One worker process per GPU of this host; units from the shared scheduler queue."""

    name = "local"

    def __init__(self, gpus: list, pin_env: Optional[str], retries: int = DEFAULT_RETRIES, worker_cmd=None):
        self.gpus = list(gpus) or ["0"]
        self.pin_env = pin_env
        self.retries = retries
        self.worker_cmd = list(worker_cmd or [sys.executable, "-m", "zlf.executors"])
        self.events: queue.Queue = queue.Queue()

    def describe(self) -> str:
        pin = f"pinned with {self.pin_env}" if self.pin_env else "not pinned (the backend has no visible-devices variable)"
        return f"{len(self.gpus)} local worker(s) on GPU {','.join(self.gpus)}, {pin}"

    def worker_info(self, slot: _Slot) -> dict:
        info = {"gpu": slot.gpu, "worker_pid": slot.pid}
        if self.pin_env:
            info["pin"] = f"{self.pin_env}={slot.gpu}"
        return info

    def _start(self, slot: _Slot) -> None:
        env = dict(os.environ)
        if self.pin_env:
            env[self.pin_env] = slot.gpu
        env["ZLF_GPU"] = slot.gpu  # the label, for logs; zlf itself reads only the pin variable
        slot.generation += 1
        slot.proc = subprocess.Popen(self.worker_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     text=True, preexec_fn=die_with_parent(signal.SIGKILL))
        slot.pid = slot.proc.pid
        gen, out = slot.generation, slot.proc.stdout

        def read() -> None:
            for line in out:
                try:
                    self.events.put((slot, gen, json.loads(line)))
                except json.JSONDecodeError:
                    continue  # a stray print of the worker is not an event
            self.events.put((slot, gen, None))

        threading.Thread(target=read, daemon=True).start()

    def _send(self, slot: _Slot, job, unit) -> bool:
        msg = {"unit": unit.id, "root": str(job.root), "runs": [job.spec(k) for k in unit.keys]}
        try:
            slot.proc.stdin.write(json.dumps(msg) + "\n")
            slot.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def run(self, job, scheduler) -> None:
        """Run every unit the scheduler hands out; returns when none is left or no worker is."""
        slots = [_Slot(g) for g in self.gpus]
        for slot in slots:
            scheduler.add_worker(slot.gpu)
            self._start(slot)
        try:
            while True:
                for slot in slots:
                    if slot.proc is None or slot.tally is not None or slot.gpu not in scheduler.live:
                        continue
                    unit = scheduler.take(slot.gpu, job.skip)
                    if unit is None:
                        continue
                    slot.tally = _UnitTally(unit)
                    if not self._send(slot, job, unit):
                        continue  # its end-of-output event files the loss
                if scheduler.finished or not scheduler.live:
                    return
                if not any(s.tally for s in slots) and not scheduler.running():
                    return  # queued units wait for nothing that can still finish
                try:
                    slot, gen, event = self.events.get(timeout=1.0)
                except queue.Empty:
                    continue
                if gen != slot.generation:
                    continue  # a restarted worker's predecessor
                self._handle(slot, event, job, scheduler)
        except BaseException as exc:
            self._abandon(slots, job, scheduler)
            if isinstance(exc, Terminated):  # Ctrl-C reached the workers too; SIGTERM only this process
                for slot in slots:
                    if slot.proc is not None and slot.proc.poll() is None:
                        slot.proc.send_signal(signal.SIGTERM)
            raise
        finally:
            self._stop(slots)

    def _handle(self, slot: _Slot, event, job, scheduler) -> None:
        info = self.worker_info(slot)
        if event is None:
            self._lost(slot, job, scheduler)
            return
        kind = event.get("event")
        if kind == "hello":
            slot.pid = event.get("pid")
        elif kind == "start":
            job.started(event["key"], info)
        elif kind == "outcome":
            ok = job.finished(event["key"], event["outcome"], info)
            slot.tally.add(event["key"], event["outcome"], ok)
        elif kind == "unit_done" and slot.tally is not None:
            tally, slot.tally = slot.tally, None
            tally.finish(job, scheduler, slot.gpu)

    def _lost(self, slot: _Slot, job, scheduler) -> None:
        rc = slot.proc.wait() if slot.proc else None
        slot.proc = None
        slot.deaths += 1
        reason = f"worker on GPU {slot.gpu} died (exit code {rc})"
        if slot.tally is not None:
            unit, slot.tally = slot.tally.unit, None
            job.lost(unit)
            again = scheduler.lost(unit.id, slot.gpu, reason)
            job.note(f"{reason} during {unit.id}: " + ("queued again" if again else "given up; --resume runs it"))
        if slot.deaths > self.retries:
            scheduler.retire_worker(slot.gpu)
            job.note(f"GPU {slot.gpu} retired after {slot.deaths} worker deaths")
        else:
            self._start(slot)

    def _abandon(self, slots, job, scheduler) -> None:
        """Interrupted: the units in flight are pending again (their runs die with the workers)."""
        for slot in slots:
            if slot.tally is not None:
                job.lost(slot.tally.unit)
                slot.tally = None

    def _stop(self, slots) -> None:
        for slot in slots:
            if slot.proc is None:
                continue
            try:
                slot.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + STOP_GRACE_S
        for slot in slots:
            if slot.proc is None:
                continue
            try:
                slot.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                slot.proc.kill()
                slot.proc.wait()


# ----------------------------------------------------------------------------- Ray
def _pack(root: Path, rel_paths) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel in rel_paths:
            if (root / rel).exists():
                tar.add(str(root / rel), arcname=rel)
    return buf.getvalue()


def _unpack(data: bytes, root: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(str(root), filter="data")
        else:  # Python < 3.11.4; the archive comes from our own task
            tar.extractall(str(root))


def private_dir(name: str) -> Path:
    """``<tmp>/<name>-<uid>``, a folder of this user's only (mode 0700), kept across tasks; when
    that path exists but is a link, someone else's or open to others (anyone can create it
    first in a shared /tmp), a fresh ``mkdtemp`` folder instead: kernels compiled into a cache
    another user controls would run as ours."""
    base = Path(tempfile.gettempdir()) / f"{name}-{os.getuid()}"
    try:
        base.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"{name}-"))
    if is_private_dir(base):
        return base
    return Path(tempfile.mkdtemp(prefix=f"{name}-"))


def run_unit_remote(payload: dict, pin_env: Optional[str]) -> dict:
    """A Ray task: run one unit's specs in a scratch folder on whatever node Ray chose, return
    the outcomes and the produced run directories and logs as one archive."""
    import ray

    gpus = [str(g) for g in ray.get_gpu_ids()]
    extra = {pin_env: ",".join(gpus)} if pin_env and gpus else {}
    # Triton caches inside the campaign stay on the node across tasks, as they stay on the host
    # across runs without Ray (compiling is never timed, but it costs the same on every run).
    caches = private_dir("zlf-ray-cache") / safe_name(payload.get("cache", "campaign"))
    with tempfile.TemporaryDirectory(prefix="zlf-ray-") as scratch:
        root = Path(scratch)
        if payload.get("inputs"):
            _unpack(payload["inputs"], root)
        outcomes = []
        for spec in payload["runs"]:
            cache = spec["env"].get("TRITON_CACHE_DIR", "")
            here = {**extra, "TRITON_CACHE_DIR": cache.replace(ROOT, str(caches))} if ROOT in cache else extra
            outcome = execute_spec(spec, root, here)
            outcomes.append(outcome)
            if outcome["rc"] != 0 and not (goes_on(spec) and not interrupted(outcome)):
                break
        files = _pack(root, [p for o, s in zip(outcomes, payload["runs"]) for p in (s["dir"], s["log"])])
    return {"outcomes": outcomes, "files": files, "host": socket.gethostname(), "gpus": gpus,
            "node": ray.get_runtime_context().get_node_id()}


class RayPool:
    """Ray tasks of one GPU each; results are written back into the job's root on the driver.

    Ray's own task retries are off: a lost task is re-submitted through the scheduler, so the
    ``--retries`` budget and the per-worker counts stay in one place.
    """

    name = "ray"

    def __init__(self, address: Optional[str], gpus: list, pin_env: Optional[str], retries: int = DEFAULT_RETRIES):
        self.address = None if address in (None, "", "local") else address
        self.gpus = list(gpus)
        self.pin_env = pin_env
        self.retries = retries
        self.capacity = 0

    def describe(self) -> str:
        where = redact_text(self.address) if self.address else f"a local Ray instance with {len(self.gpus) or 'the detected'} GPU(s)"
        return f"Ray tasks of one GPU each on {where}"

    def _init(self):
        try:
            import ray
        except ImportError:
            raise UsageError("--executor ray needs Ray: pip install 'zlf[ray]'") from None
        if ray.is_initialized():
            return ray, False
        kwargs = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
        if self.gpus and not self.address:
            kwargs["num_gpus"] = len(self.gpus)  # on a CPU machine: fake GPU resources (tests)
        try:
            ray.init(address=self.address, **kwargs) if self.address else ray.init(**kwargs)
        except Exception as exc:  # a cluster that cannot be reached, ray[client] missing ...: one line
            where = redact_text(self.address) if self.address else "a local Ray instance"
            why = redact_text(" ".join(str(exc).split()) or type(exc).__name__)
            raise UsageError(f"cannot start Ray tasks on {where}: {why}") from None
        return ray, True

    def run(self, job, scheduler) -> None:
        ray, owned = self._init()
        try:
            self.capacity = int(ray.cluster_resources().get("GPU", 0))
            if self.capacity < 1:
                raise UsageError("the Ray cluster has no GPU resources (start it with --num-gpus, or give --gpus)")
            # a worker serves task after task (Ray's default for GPU tasks is a new worker each, so
            # that none keeps device memory; this one never touches the device: each run is a
            # process of its own), which saves each unit a worker's start-up (~1 CPU-s on a CPU machine)
            task = ray.remote(num_gpus=1, max_retries=0, max_calls=0)(run_unit_remote)
            inflight: dict = {}
            try:
                self._loop(ray, task, job, scheduler, inflight)
            except BaseException:
                for ref, unit in inflight.items():
                    ray.cancel(ref, force=True)
                    job.lost(unit)
                raise
        finally:
            if owned:
                ray.shutdown()

    def _loop(self, ray, task, job, scheduler, inflight) -> None:
        while True:
            while len(inflight) < self.capacity:
                unit = scheduler.take(self.name, job.skip)
                if unit is None:
                    break
                specs = [job.spec(k) for k in unit.keys]
                needs = sorted({n for s in specs for n in s.get("needs", ())})
                payload = {"unit": unit.id, "runs": specs, "inputs": _pack(Path(job.root), needs) if needs else b"",
                           "cache": Path(job.root).name}
                for k in unit.keys:
                    job.started(k, {"gpu": "ray"})
                inflight[task.remote(payload, self.pin_env)] = unit
            if not inflight:
                return
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
            for ref in ready:
                unit = inflight.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    job.lost(unit)
                    reason = f"Ray task lost: {type(exc).__name__}"
                    again = scheduler.lost(unit.id, self.name, reason)
                    job.note(f"{reason} during {unit.id}: " + ("queued again" if again else "given up; --resume runs it"))
                    continue
                self._file(result, unit, job, scheduler)

    def _file(self, result: dict, unit, job, scheduler) -> None:
        root = Path(job.root)
        for key in unit.keys:
            job.discard(key)
        _unpack(result["files"], root)
        worker = f"{result['host']}:gpu{','.join(result['gpus']) or '?'}"
        info = {"gpu": worker, "node": result["node"]}
        tally = _UnitTally(unit)
        for outcome in result["outcomes"]:
            job.started(outcome["key"], info)
            tally.add(outcome["key"], outcome, job.finished(outcome["key"], outcome, info))
        if tally.reported:
            tally.finish(job, scheduler, worker)
        else:
            scheduler.done(unit.id, worker)


def _worker_entry() -> int:
    """``python -m zlf.executors``: Ctrl-C reaches the whole process group; the driver reports
    it once, so a worker just stops (its run has already been stopped by execute_spec). SIGTERM
    (from the driver, or its death) stops it the same way."""
    from .procs import handle_sigterm, stop_code

    handle_sigterm()
    try:
        return worker_main()
    except KeyboardInterrupt as exc:
        return stop_code(exc)
    except BrokenPipeError:  # the driver is gone
        return 1


if __name__ == "__main__":
    sys.exit(_worker_entry())

