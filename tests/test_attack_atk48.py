"""ATTACK atk48: status verification, zlf ir re-exec, task-package helper isolation,
state leaked by in-process zlf.cli.main calls. Each risky case runs in its own Python process."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

PY = sys.executable


def _script(tmp_path, body, env=None, cwd=None, timeout=240):
    f = tmp_path / "attack_script.py"
    f.write_text(textwrap.dedent(body))
    from zlf.testing import clean_env

    e = clean_env({})
    e.pop("TRITON_INTERPRET", None)
    e["XDG_CONFIG_HOME"] = str(tmp_path / "cfg")
    e.update(env or {})
    return subprocess.run([PY, str(f)], capture_output=True, text=True, env=e, cwd=cwd or tmp_path,
                          timeout=timeout, stdin=subprocess.DEVNULL)


# ----------------------------------------------------------------------------- 3. task package helpers
@pytest.mark.extensions("task")
def test_candidate_json_py_does_not_replace_stdlib_json_for_the_judge(tmp_path):
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "json.py").write_text("FAKE = True\ndef dumps(*a, **k):\n    return 'forged'\n")
    (cand / "kernel.py").write_text("def run_kernel(*args):\n    return 1\n")
    r = _script(tmp_path, f"""
        import importlib, json, sys
        real = json
        from pathlib import Path
        from zlf_taskpkg.candidate import PythonKernel
        PythonKernel(Path({str(cand / 'kernel.py')!r}))
        again = importlib.import_module("json")
        print("SAME" if sys.modules.get("json") is real and again is real else "EVICTED", getattr(again, "FAKE", False))
    """)
    assert r.returncode == 0, r.stderr
    assert "SAME" in r.stdout, r.stdout  # the judge's json is still the stdlib's


@pytest.mark.extensions("task")
def test_package_torch_folder_does_not_evict_the_judges_torch(tmp_path):
    cand = tmp_path / "cand"
    (cand / "torch").mkdir(parents=True)
    (cand / "torch" / "__init__.py").write_text("FAKE = True\n")
    (cand / "kernel.py").write_text("def run_kernel(*args):\n    return 1\n")
    r = _script(tmp_path, f"""
        import sys, torch
        before = {{n for n in sys.modules if n == "torch" or n.startswith("torch.")}}
        from pathlib import Path
        from zlf_taskpkg.candidate import PythonKernel
        PythonKernel(Path({str(cand / 'kernel.py')!r}))
        after = {{n for n in sys.modules if n == "torch" or n.startswith("torch.")}}
        print("LOST", len(before - after), "KEPT", sys.modules.get("torch") is torch)
    """)
    assert r.returncode == 0, r.stderr
    assert "LOST 0 KEPT True" in r.stdout, r.stdout


@pytest.mark.extensions("task")
def test_candidate_helpers_of_a_subpackage_with_relative_import(tmp_path):
    """A candidate whose helpers are a sub-package with a relative import finds its own files even
    when another ``util`` package was loaded first."""
    for name in ("one", "two"):
        d = tmp_path / name / "util"
        d.mkdir(parents=True)
        (d / "__init__.py").write_text("from .inner import VALUE\n")
        (d / "inner.py").write_text(f"VALUE = {name!r}\n")
        (tmp_path / name / "kernel.py").write_text("from util import VALUE\ndef run_kernel(*a):\n    return VALUE\n")
    r = _script(tmp_path, f"""
        from pathlib import Path
        from zlf_taskpkg.candidate import PythonKernel
        a = PythonKernel(Path({str(tmp_path / 'one' / 'kernel.py')!r}))
        b = PythonKernel(Path({str(tmp_path / 'two' / 'kernel.py')!r}))
        print(a.fn(), b.fn())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["one", "two"]


@pytest.mark.extensions("task")
def test_symlinked_candidate_folder_gets_its_own_helpers(tmp_path):
    """Two candidates reached through symlinked folders still each import their own helpers."""
    for name in ("one", "two"):
        d = tmp_path / "real" / name
        d.mkdir(parents=True)
        (d / "helpers.py").write_text(f"VALUE = {name!r}\n")
        (d / "kernel.py").write_text("from helpers import VALUE\ndef run_kernel(*a):\n    return VALUE\n")
        (tmp_path / f"link_{name}").symlink_to(d)
    r = _script(tmp_path, f"""
        from pathlib import Path
        from zlf_taskpkg.candidate import PythonKernel
        a = PythonKernel(Path({str(tmp_path / 'link_one' / 'kernel.py')!r}))
        b = PythonKernel(Path({str(tmp_path / 'link_two' / 'kernel.py')!r}))
        print(a.fn(), b.fn())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["one", "two"]


# ----------------------------------------------------------------------------- 1. zlf ab --status
import shutil
from pathlib import Path

DATA = Path(__file__).parent / "data" / "attack_atk48" / "campaign"


@pytest.fixture
def campaign(tmp_path, monkeypatch):
    """A real finished A/A campaign (3 rounds, cpu backend), copied and signed with this test's key."""
    from zlf.ab.campaign import Campaign, signing_key

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    path = tmp_path / "camp"
    shutil.copytree(DATA, path, symlinks=True)
    assert signing_key(create=True)
    c = Campaign.open(path)
    c.seal()
    c.save()
    return path


def _edit(path, change):
    doc = json.loads((path / "campaign.json").read_text())
    change(doc)
    (path / "campaign.json").write_text(json.dumps(doc, indent=2))


def _status(path, capsys, fmt="table"):
    from zlf.ab.cli import status

    rc = status(str(path), fmt)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_status_of_the_signed_campaign_is_verified(campaign, capsys):
    rc, out, err = _status(campaign, capsys)
    assert rc == 0 and "NOT VERIFIED" not in err
    assert "add/5000/float32" in out


def test_status_warns_when_runs_are_swapped_between_sides(campaign, capsys):
    _, before, _ = _status(campaign, capsys)

    def swap(doc):
        for run in doc["runs"]:
            run["dir"] = run["dir"].replace("_A", "_@").replace("_B", "_A").replace("_@", "_B")
            run["process"] = (run.get("process") or "").replace("_A", "_@").replace("_B", "_A").replace("_@", "_B")
    _edit(campaign, swap)
    rc, after, err = _status(campaign, capsys)
    assert after != before  # the verdicts shown did change (SLOWER became FASTER)
    assert "NOT VERIFIED" in err


def test_status_warns_when_a_round_is_dropped_from_runs(campaign, capsys):
    _, before, _ = _status(campaign, capsys)
    _edit(campaign, lambda doc: doc.update(runs=[r for r in doc["runs"] if r["round"] != 3]))
    rc, after, err = _status(campaign, capsys)
    assert after != before
    assert "NOT VERIFIED" in err


def test_status_warns_when_the_signed_op_list_was_edited(campaign, capsys):
    _edit(campaign, lambda doc: doc.update(ops=[o for o in doc["ops"] if o["name"] != "add"]))
    rc, out, err = _status(campaign, capsys)
    assert "add/5000" not in out  # the SLOWER op is gone from the table
    assert "NOT VERIFIED" in err


def test_status_json_of_a_forged_campaign_says_not_verified(campaign, capsys):
    rc, out, err = _status(campaign, capsys, "json")
    assert rc == 0 and "NOT VERIFIED" not in err
    assert json.loads(out) and all(row["verified"] is True for row in json.loads(out))
    _edit(campaign, lambda doc: doc["statistics"].update(alpha=0.5))
    rc, out, err = _status(campaign, capsys, "json")
    assert "NOT VERIFIED" in err
    # a JSON consumer (CI) reads no stderr: every row says the table is not verified
    assert json.loads(out) and all(row["verified"] is False for row in json.loads(out))


def test_report_of_a_forged_campaign_says_not_verified(campaign, capsys):
    from zlf.cli import main

    _edit(campaign, lambda doc: doc["statistics"].update(alpha=0.5))
    (campaign / "summary.log").write_text("add: FASTER -40% (forged)\n")
    rc = main(["report", str(campaign)])
    out = capsys.readouterr()
    assert rc == 0
    assert "NOT VERIFIED" in out.out + out.err


def test_status_key_that_others_can_read_is_not_trusted(campaign, capsys, tmp_path):
    from zlf.ab.campaign import key_path

    os.chmod(key_path(), 0o644)
    rc, out, err = _status(campaign, capsys)
    assert "!!! NOT VERIFIED" in err


def test_status_key_symlinked_to_another_key_does_not_verify(campaign, capsys, tmp_path):
    from zlf.ab.campaign import key_path

    other = tmp_path / "other.key"
    other.write_text("b" * 64 + "\n")
    os.chmod(other, 0o600)
    key_path().unlink()
    key_path().symlink_to(other)
    rc, out, err = _status(campaign, capsys)
    assert "!!! NOT VERIFIED" in err


def test_status_reason_with_control_characters_is_one_clean_line(campaign, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "x\n!!! VERIFIED OK\x1b[2K"))
    rc, out, err = _status(campaign, capsys)
    lines = [l for l in err.splitlines() if "VERIFIED" in l]
    assert len(lines) == 1 and lines[0].startswith("!!! NOT VERIFIED") and "\x1b" not in err


# ----------------------------------------------------------------------------- 2. zlf ir's fresh process
import signal
import time

INTERPRETED = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import triton.language  # interpreted in this process, as an in-process cpu run leaves it
del os.environ["TRITON_INTERPRET"]
from zlf.cli import main
"""


def _ir_env(tmp_path, **more):
    env = {"TRITON_CACHE_DIR": str(tmp_path / "triton_cache")}
    env.update(more)
    return env


@pytest.mark.extensions("ir_dump")
def test_ir_fresh_process_does_not_import_zlf_from_the_working_directory(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "PWNED"
    (work / "zlf.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    r = _script(tmp_path, INTERPRETED + """
rc = main(["ir", "add", "--target", "cuda:90", "--ext", "ir_dump", "--out", "out"])
print("RC", rc)
""", env=_ir_env(tmp_path), cwd=work)
    assert not marker.exists(), "a zlf.py of the working directory ran as zlf"
    assert "RC 0" in r.stdout, r.stdout + r.stderr


@pytest.mark.extensions("ir_dump")
def test_ir_marker_inherited_from_the_caller_does_not_stop_the_fresh_process(tmp_path):
    r = _script(tmp_path, INTERPRETED + """
rc = main(["ir", "add", "--target", "cuda:90", "--ext", "ir_dump", "--out", "out"])
print("RC", rc)
""", env=_ir_env(tmp_path, ZLF_IR_FRESH_PROCESS="1"))
    assert "RC 0" in r.stdout, r.stdout + r.stderr


@pytest.mark.extensions("ir_dump")
def test_ir_fresh_process_keeps_odd_arguments_and_redacts_secrets(tmp_path):
    """Spaces, unicode, a relative --out after a chdir: the fresh process gets the same command
    line; a credential-looking variable of the caller is in no file of the run."""
    r = _script(tmp_path, INTERPRETED + """
os.makedirs("sub dir", exist_ok=True)
os.chdir("sub dir")
rc = main(["ir", "add", "--target", "cuda:90", "--ext", "ir_dump", "--out", "out ü x", "--name", "lbl é", "--dtype", "float32"])
print("RC", rc)
""", env=_ir_env(tmp_path, TRITON_REMOTE_API_TOKEN="s3cr3t-tok-123", LLVM_PASSWORD="hunter2-pw-987"))
    assert "RC 0" in r.stdout, r.stdout + r.stderr
    runs = list((tmp_path / "sub dir" / "out ü x").iterdir())
    assert len(runs) == 1
    meta = json.loads((runs[0] / "meta.json").read_text())
    assert meta["command"][:2] == ["zlf", "ir"] and "lbl é" in meta["command"]
    for f in runs[0].rglob("*"):
        if f.is_file():
            text = f.read_bytes()
            assert b"s3cr3t-tok-123" not in text and b"hunter2-pw-987" not in text, f


SLOW_OP = """
import os, time, torch, zlf
def slow(x):
    open(os.environ["ATK_MARKER"], "w").write("in")
    time.sleep(120)
    return x
op = zlf.Op(name="slow", fn=slow, make_inputs=lambda shape, dtype, device: (torch.ones(shape),),
            reference=lambda x: x, shapes=[(8,)], dtypes=["float32"], cpu_shapes=[(8,)])
"""


@pytest.mark.extensions("ir_dump")
@pytest.mark.parametrize("interpreted", [False, True])
def test_ir_interrupted_parent_leaves_the_run_recorded(tmp_path, interpreted):
    """SIGINT to the zlf ir process while a point compiles: the run directory keeps a meta.json
    (status interrupted), whether zlf ir ran in this process or in the fresh one it started."""
    (tmp_path / "slow_ops.py").write_text(SLOW_OP)
    marker = tmp_path / "in_fn"
    body = (INTERPRETED if interpreted else "import os, sys\nfrom zlf.cli import main\n") + """
rc = main(["ir", "slow_ops.py::op", "--target", "cuda:90", "--ext", "ir_dump", "--out", "out"])
print("RC", rc)
sys.exit(rc)
"""
    f = tmp_path / "attack_script.py"
    f.write_text(body)
    from zlf.testing import clean_env

    env = clean_env(dict(XDG_CONFIG_HOME=str(tmp_path / "cfg"), ATK_MARKER=str(marker), **_ir_env(tmp_path)))
    env.pop("TRITON_INTERPRET", None)
    # as from a terminal: a session started as a background job inherits SIGINT ignored
    p = subprocess.Popen([PY, str(f)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, stdin=subprocess.DEVNULL,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), p.communicate(timeout=60)
        p.send_signal(signal.SIGINT)  # the parent only, as kill -INT PID does
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    runs = list((tmp_path / "out").iterdir())
    assert len(runs) == 1, out + err
    assert (runs[0] / "meta.json").is_file(), (out, err, sorted(x.name for x in runs[0].iterdir()))
    assert p.returncode != 0


@pytest.mark.extensions("ir_dump")
def test_ir_unknown_hip_arch_is_one_line_before_anything_is_written(tmp_path):
    from zlf.testing import clean_env

    env = clean_env(_ir_env(tmp_path))
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([PY, "-m", "zlf", "ir", "add", "--dtype", "float32", "--target", "hip:gfx999",
                           "--ext", "ir_dump", "--out", "out"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--target" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


PLUGGED = """
import zlf

class Resolver:
    @zlf.hookimpl
    def resolve_ops(self, spec, session):
        if spec != "myadd":
            return None
        from zlf.ops import builtin_ops
        return [builtin_ops(session.backend)["add"]]

rc = main(["ir", "myadd", "--target", "cuda:90", "--dtype", "float32", "--out", "out"],
          extra_plugins=[("resolver", Resolver())])
print("RC", rc)
"""


@pytest.mark.extensions("ir_dump")
@pytest.mark.parametrize("interpreted", [False, True])
def test_ir_fresh_process_keeps_the_callers_extra_plugins(tmp_path, interpreted):
    head = INTERPRETED if interpreted else "import os, sys\nfrom zlf.cli import main\n"
    r = _script(tmp_path, head + PLUGGED, env=_ir_env(tmp_path))
    assert "RC 0" in r.stdout, r.stdout + r.stderr


# ----------------------------------------------------------------------------- 4. in-process calls
BROKEN = """
import os, sys, zlf
from zlf.cli import main

class Dashboard:
    @zlf.hookimpl
    def after_run(self, run, results):
        raise BrokenPipeError(32, "Broken pipe")  # the plugin's own socket, not zlf's stdout

rc = main(["run", "add", "--backend", "cpu", "--rep-ms", "2", "--warmup-ms", "1", "--out", "r"],
          extra_plugins=[("dashboard", Dashboard())])
sys.stdout.flush()
os.write(1, b"AFTER rc=%d\\n" % rc)
os.write(2, b"STDERR rc=%d\\n" % rc)
"""


def test_in_process_main_does_not_silence_the_callers_stdout(tmp_path):
    r = _script(tmp_path, BROKEN)
    assert "STDERR rc=1" in r.stderr, r.stderr
    assert "AFTER rc=1" in r.stdout, (r.stdout, r.stderr)
    assert "zlf: error: [Errno 32] Broken pipe" in r.stderr


RNG = """
import random, numpy as np, torch
from zlf.cli import main

def draw():
    return (random.random(), float(np.random.rand()), float(torch.rand(1)))

def seed():
    random.seed(7); np.random.seed(7); torch.manual_seed(7)

seed(); expected = draw()
seed()
rc = main(["run", "add", "--backend", "cpu", "--rep-ms", "2", "--warmup-ms", "1", "--out", "r"])
print("RC", rc, "SAME" if draw() == expected else "CHANGED")
"""


@pytest.mark.extensions("seed")
def test_in_process_run_gives_back_the_callers_random_state(tmp_path):
    r = _script(tmp_path, RNG)
    assert "RC 0" in r.stdout, r.stdout + r.stderr
    assert "SAME" in r.stdout


PROBE = """
import os, sys, signal, logging, torch
from zlf.cli import main

def snap():
    u = os.umask(0o022); os.umask(u)
    sigs = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                                              signal.SIGALRM, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD)}
    return (os.getcwd(), u, sigs, signal.getitimer(signal.ITIMER_REAL), list(sys.path), torch.get_num_threads(),
            torch.get_default_dtype(), sys.stdout, sys.stderr, sys.excepthook, logging.root.level,
            list(logging.root.handlers), dict(os.environ))

os.umask(0o077)
before = snap()
rc = main(sys.argv[1:])
after = snap()
print("RC", rc)
for i, (a, b) in enumerate(zip(before, after)):
    if a != b:
        print("LEAK", i, str(a)[:200], "->", str(b)[:200])
"""


@pytest.mark.parametrize("argv", [
    ["run", "add", "--backend", "cpu", "--rep-ms", "2", "--warmup-ms", "1", "--out", "r"],
    ["run", "nosuchop", "--backend", "cpu", "--out", "r"],
    ["compare", "nowhere_a", "nowhere_b"],
])
def test_in_process_main_leaves_process_state_as_it_was(tmp_path, argv):
    (tmp_path / "probe.py").write_text(PROBE)
    from zlf.testing import clean_env

    done = subprocess.run([PY, str(tmp_path / "probe.py"), *argv], cwd=tmp_path, env=clean_env({
        "XDG_CONFIG_HOME": str(tmp_path / "cfg")}), capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL)
    assert "RC " in done.stdout, done.stdout + done.stderr
    assert "LEAK" not in done.stdout, done.stdout


# ----------------------------------------------------------------------------- more
def test_status_warns_when_a_partial_campaign_is_marked_complete(campaign, capsys):
    def unfinish(doc):
        for run in doc["runs"]:
            if run["round"] == 3:
                run["status"] = "pending"
        doc["status"] = "interrupted"
    _edit(campaign, unfinish)
    _, partial, _ = _status(campaign, capsys)
    assert "PARTIAL" in partial
    _edit(campaign, lambda doc: doc.update(status="complete"))
    rc, out, err = _status(campaign, capsys)
    assert "PARTIAL" not in out  # shown as the campaign's final table
    assert "NOT VERIFIED" in err


@pytest.mark.extensions("task")
def test_candidate_folder_does_not_shadow_a_module_the_judge_imports_later(tmp_path):
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "csv.py").write_text("FAKE = True\n")
    (cand / "kernel.py").write_text("def run_kernel(*args):\n    return 1\n")
    r = _script(tmp_path, f"""
        import sys
        sys.modules.pop("csv", None)
        from pathlib import Path
        from zlf_taskpkg.candidate import PythonKernel
        PythonKernel(Path({str(cand / 'kernel.py')!r}))
        import csv
        print("FAKE" if getattr(csv, "FAKE", False) else "REAL")
    """)
    assert r.returncode == 0, r.stderr
    assert "REAL" in r.stdout, r.stdout


KILLER_OP = """
import os, signal, sys, torch, zlf
def boom(x):  # in the fresh process alone (python -m zlf_ir_dump.fresh)
    if getattr(sys.modules["__main__"].__spec__, "name", None) == "zlf_ir_dump.fresh":
        os.kill(os.getpid(), signal.SIGKILL)
    return x
op = zlf.Op(name="boom", fn=boom, make_inputs=lambda shape, dtype, device: (torch.ones(shape),),
            reference=lambda x: x, shapes=[(8,)], dtypes=["float32"], cpu_shapes=[(8,)])
"""


@pytest.mark.extensions("ir_dump")
def test_ir_fresh_process_killed_by_a_signal_is_a_proper_exit_code(tmp_path):
    (tmp_path / "killer_ops.py").write_text(KILLER_OP)
    r = _script(tmp_path, INTERPRETED + """
rc = main(["ir", "killer_ops.py::op", "--target", "cuda:90", "--ext", "ir_dump", "--out", "out"])
print("RC", rc)
""", env=_ir_env(tmp_path))
    rc = int(r.stdout.split("RC ")[-1].split()[0])
    assert 0 < rc < 256, r.stdout + r.stderr


def test_a_reader_gone_from_zlfs_own_stdout_still_ends_quietly_with_141(tmp_path):
    """The other side of the case above: where the BrokenPipeError is zlf's own stdout's (`zlf
    plugins | head -c0`), the command still stops quietly with 141, as cat(1) does."""
    from zlf.testing import clean_env

    proc = subprocess.Popen([sys.executable, "-m", "zlf", "plugins"], cwd=tmp_path, env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before zlf has imported anything, so before its first write
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, err
    assert "Traceback" not in err and "error" not in err, err
