"""ATTACK atk52: ``zlf ir``'s --target preflight (zlf_ir_dump.preflight) and the caller's plugins
taken to the fresh process (zlf_ir_dump.fresh, aot._in_a_fresh_process). Each case runs zlf in a
Python process of its own; a Triton cache is shared by the module so that compiles are cached."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.extensions("ir_dump")

PY = sys.executable

OPS = textwrap.dedent('''
    import torch, triton, triton.language as tl, zlf

    @triton.jit
    def tiny_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    def tiny(x):
        tiny_kernel[(triton.cdiv(x.numel(), 128),)](x, x.numel(), BLOCK=128)

    def make(shape, dtype, device):
        return (torch.zeros(shape, dtype=getattr(torch, dtype), device=device),)

    tiny_op = zlf.Op(name="tiny", fn=tiny, make_inputs=make, shapes=[(256,)], dtypes=("float32",))
''')

#: a caller that imported Triton interpreted: its zlf ir runs in the fresh process
INTERPRETED = ("import os, sys\nos.environ['TRITON_INTERPRET'] = '1'\nimport triton.language\n"
               "del os.environ['TRITON_INTERPRET']\nfrom zlf.cli import main\n")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("atk52_cache") / "triton"


@pytest.fixture
def work(tmp_path):
    (tmp_path / "ops.py").write_text(OPS)
    return tmp_path


def _env(cache, extra=None):
    from zlf.testing import clean_env

    e = clean_env({})
    e.pop("TRITON_INTERPRET", None)
    e.pop("ZLF_IR_FRESH_PROCESS", None)
    e["TRITON_CACHE_DIR"] = str(cache)
    e["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton 3.9's once-per-process warning off
    e.update(extra or {})
    return e


def _script(work, cache, body, env=None, timeout=300, name="attack_script.py", cwd=None):
    f = work / name
    f.write_text(textwrap.dedent(body))
    return subprocess.run([PY, str(f)], capture_output=True, text=True, errors="replace", env=_env(cache, env),
                          cwd=cwd or work, timeout=timeout, stdin=subprocess.DEVNULL)


def _ir(out, target="cuda:90", op="ops.py::tiny_op", ext=False):
    """zlf ir's argv as Python source; no --ext by default (--ext leaves main()'s plugins inactive)."""
    more = ", '--ext', 'ir_dump'" if ext else ""
    return f"['ir', {op!r}, '--target', {target!r}{more}, '--out', {str(out)!r}]"


# =============================================================================== 1. --target preflight
@pytest.mark.parametrize("target", ["cuda:80", "cuda:90", "hip:gfx942"])
def test_targets_that_passed_before_still_compile(work, cache, target):
    done = subprocess.run([PY, "-m", "zlf", "ir", "ops.py::tiny_op", "--target", target, "--ext", "ir_dump",
                           "--out", "out"], cwd=work, env=_env(cache), capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run dir: " in done.stdout
    assert "cannot compile" not in done.stderr


def test_the_probe_kernel_is_not_in_the_ir_tree(work, tmp_path_factory):
    """The probe compiles before the collector listens: it must never be filed as an op's kernel."""
    fresh_cache = tmp_path_factory.mktemp("atk52_own_cache")
    done = subprocess.run([PY, "-m", "zlf", "ir", "ops.py::tiny_op", "--target", "cuda:80", "--ext", "ir_dump",
                           "--out", "out"], cwd=work, env=_env(fresh_cache), capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    index = next((work / "out").glob("*/ir/index.tsv")).read_text()
    assert "zlf_target_probe" not in index
    assert "tiny_kernel" in index


@pytest.mark.parametrize("target", ["hip:gfx999", "hip:gfx1030", "hip:gfx1199", "cuda:101"])
def test_a_target_the_compiler_refuses_is_one_line_and_nothing_written(work, cache, target):
    done = subprocess.run([PY, "-m", "zlf", "ir", "ops.py::tiny_op", "--target", target, "--ext", "ir_dump",
                           "--out", "out"], cwd=work, env=_env(cache), capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    if done.returncode == 0:  # this Triton builds for it: nothing to refuse
        pytest.skip(f"Triton here compiles for {target}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"zlf: error: --target '{target}': Triton "), done.stderr
    assert "cannot compile for it (" in lines[0]
    assert not (work / "out").exists()


@pytest.mark.parametrize("target", [
    pytest.param("cuda:9\x1b[2J0", id="ansi"), pytest.param("hip:gfx942\nzlf: forged line", id="newline"),
    pytest.param("cuda:" + "9" * 5000, id="5000_digits"),
    pytest.param("hip:gfx" + "9" * 5000, id="long_hip"),
    pytest.param("hip:gfx9\r42", id="cr"), pytest.param("cuda:\u0669\u0660", id="arabic_digits"),
    pytest.param("cuda:90\x07", id="bell")])
def test_odd_targets_are_one_escaped_line(work, cache, target):
    done = subprocess.run([PY, "-m", "zlf", "ir", "ops.py::tiny_op", "--target", target, "--ext", "ir_dump",
                           "--out", "out"], cwd=work, env=_env(cache), capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("zlf: error: --target "), done.stderr
    assert not any(c in done.stderr for c in "\x1b\r\x07"), repr(done.stderr)
    assert not (work / "out").exists()


#: the compiler, faulty for the probe kernel alone: Triton's compile patched at start-up
#: (sitecustomize) of every Python process the test starts, zlf's and any child that compiles
COMPILER = """
import os, signal, sys, time
import triton
real = triton.compile

def compile(src, target=None, options=None, **kw):
    if "zlf_target_probe" not in repr(getattr(src, "fn", None)) + str(getattr(src, "name", "")):
        return real(src, target=target, options=options, **kw)
    os.write(1, b"PTX DUMP ON FD 1\\n")
    os.write(2, b"LLVM ERROR: Cannot select: the compiler crashed\\n")
    {action}

triton.compile = compile
"""

#: the process that calls zlf: its pid is there for a compiler to signal it (as timeout(1) would)
PATCHED_COMPILE = """
import os, sys
os.environ["ATK52_ZLF_PID"] = str(os.getpid())
from zlf.cli import main
rc = main({argv})
print("RC", rc)
"""


def _faulty(where, compiler, **fields):
    """PYTHONPATH for a folder whose sitecustomize patches Triton's compile with ``compiler``."""
    folder = where / "faulty_compiler"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(textwrap.dedent(compiler.format(**fields)))
    return {"PYTHONPATH": str(folder)}


def _patched(work, cache, action, argv, tail=""):
    return _script(work, cache, PATCHED_COMPILE.format(argv=argv) + tail, env=_faulty(work, COMPILER, action=action))


def test_a_probe_that_crashes_the_compiler_says_so_in_a_line(work, cache):
    """A compiler that aborts on a target (LLVM's report_fatal_error does) ends the process while
    fds 1/2 point at preflight's temporary file: the user gets exit 134 and no word. A failing
    probe is promised to be one line naming --target; at the least its last words must show."""
    done = _patched(work, cache, "os.kill(os.getpid(), signal.SIGABRT)", _ir(work / "out"), tail="sys.exit(rc)\n")
    assert done.returncode != 0
    assert not (work / "out").exists()
    assert "--target 'cuda:90'" in done.stderr or "Cannot select" in done.stderr, (done.returncode, done.stderr)


def test_an_interrupt_during_the_probe_restores_the_fds_and_writes_nothing(work, cache):
    done = _patched(work, cache, "raise KeyboardInterrupt", _ir(work / "out"), tail=textwrap.dedent("""
        os.write(1, b"FD1 BACK\\n")
        os.write(2, b"FD2 BACK\\n")
    """))
    assert "FD1 BACK" in done.stdout and "FD2 BACK" in done.stderr, (done.stdout, done.stderr)
    assert "RC 130" in done.stdout, done.stdout + done.stderr
    assert "PTX DUMP" not in done.stdout + done.stderr
    assert not (work / "out").exists()


INPROCESS = """
import contextlib, io, os, sys
from zlf.cli import main

def ident(fd):
    s = os.fstat(fd)
    return (s.st_dev, s.st_ino, s.st_mode)

before = (ident(1), ident(2), sorted(os.listdir('/proc/self/fd')))
out, err = io.StringIO(), io.StringIO()
print("CALLER BEFORE", flush=False)
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    rc = main({argv})
after = (ident(1), ident(2), sorted(os.listdir('/proc/self/fd')))
print("CALLER AFTER")
sys.__stderr__.write("RESULT " + repr((rc, out.getvalue(), err.getvalue(), before == after, before, after)) + "\\n")
"""


@pytest.mark.parametrize("target", ["cuda:90", "hip:gfx999"])
def test_in_process_probe_with_stringio_streams_keeps_fds_and_output(work, cache, target):
    """zlf.cli.main in-process with the caller's StringIO streams: fds 1/2 are the same files
    after (no descriptor leaked), the caller's own output stays on stdout in order, the
    compiler's dump reaches neither the real fds nor the StringIOs on failure."""
    done = _script(work, cache, INPROCESS.format(argv=_ir(work / "out", target=target)))
    line = [x for x in done.stderr.splitlines() if x.startswith("RESULT ")]
    assert line, done.stdout + done.stderr
    rc, out, err, same, before, after = eval(line[0][len("RESULT "):])
    assert same, (before, after)
    assert done.stdout.splitlines() == ["CALLER BEFORE", "CALLER AFTER"], done.stdout
    if target == "cuda:90":
        assert rc == 0 and "run dir: " in out, (out, err)
    else:
        assert rc == 2 and out == "", (out, err)
        assert err.splitlines() == [err.strip()] and "--target 'hip:gfx999'" in err, err
        assert not (work / "out").exists()
    assert done.stderr.splitlines() == [line[0]], done.stderr  # nothing of the compiler on the real fd 2


def test_probe_warnings_on_success_go_to_stderr_not_stdout(work, cache):
    """A target whose probe compiles but prints (PTX on fd 1, a warning on fd 2): stdout keeps
    only zlf's table and run dir line (scripts parse it)."""
    done = _patched(work, cache, "return real(src, target=target, options=options, **kw)", _ir(work / "out"))
    assert "RC 0" in done.stdout, done.stdout + done.stderr
    assert "PTX DUMP" not in done.stdout
    assert "run dir: " in done.stdout


def test_a_cache_problem_in_the_probe_is_not_blamed_on_the_target(work, tmp_path):
    """TRITON_CACHE_DIR that can be made (the cache check passes) but whose entries cannot be
    written (the full path of a cached file is over PATH_MAX): the probe fails on the cache, and
    the line says cuda:90 -- the default, documented target -- is one Triton cannot compile for."""
    deep = str(tmp_path / "c")
    while len(deep) < 3800:
        deep += "/" + "d" * 200
    deep += "/" + "e" * (4060 - len(deep) - 1)  # the folder can be made; a file in a subfolder cannot
    done = subprocess.run([PY, "-m", "zlf", "ir", "ops.py::tiny_op", "--target", "cuda:90", "--ext", "ir_dump",
                           "--out", "out"], cwd=work, env=_env(deep), capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stdout + done.stderr
    assert not (work / "out").exists()
    assert "cannot compile for it" not in done.stderr, done.stderr
    assert "TRITON_CACHE_DIR" in done.stderr, done.stderr


# =============================================================================== 2. plugins to the fresh process
MARKER_PICKLE = """
import base64, json, os, pickle, sys

class Boom:
    def __reduce__(self):
        return (os.system, ("touch " + {marker!r},))

blob = base64.b64encode(pickle.dumps(Boom())).decode()
sys.stdout.write(json.dumps({{"path": [], "plugins": [["boom", blob]]}}))
"""


def _payload(work, cache, marker):
    done = _script(work, cache, MARKER_PICKLE.format(marker=str(marker)), name="make_payload.py")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("fresh_value", [None, "1", "0", "", "parent_of_parent", " {ppid}", "{ppid}\n"])
def test_fresh_module_run_directly_does_not_unpickle_stdin(work, cache, fresh_value):
    """``python -m zlf_ir_dump.fresh`` run by anyone but the zlf that set the variable for it
    (a user, a script, a stale exported value) takes stdin as nothing, never as pickles."""
    marker = work / "PWNED"
    payload = _payload(work, cache, marker)
    env = _env(cache)
    if fresh_value is not None:
        if fresh_value == "parent_of_parent":
            fresh_value = str(os.getppid())
        env["ZLF_IR_FRESH_PROCESS"] = fresh_value.format(ppid=os.getpid())
    subprocess.run([PY, "-P", "-m", "zlf_ir_dump.fresh", "--version"], input=payload, cwd=work, env=env,
                   capture_output=True, text=True, timeout=120)
    assert not marker.exists()


def test_fresh_marker_reaches_no_grandchild(work, cache):
    """The variable naming zlf's pid is for the fresh process alone: a child of the fresh process
    (a worker, a compiler, an op's helper) inherits it, and a process that is reparented to the
    caller (a subreaper, or PID 1 in a container) then passes the check and reads its stdin as
    pickles. It must be gone from what the fresh process hands its children."""
    ops = OPS + textwrap.dedent('''
        import os, subprocess, sys
        _seen = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('ZLF_IR_FRESH_PROCESS', 'ABSENT'))"],
                               capture_output=True, text=True).stdout.strip()
        open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "seen.txt"), "w").write(_seen)
    ''')
    (work / "ops.py").write_text(ops)
    done = _script(work, cache, INTERPRETED + f"sys.exit(main({_ir(work / 'out')}))\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (work / "seen.txt").read_text() == "ABSENT"


PLUGIN_MODULE = """
import zlf

class Resolver:
    def __init__(self):
        self.calls = 0

    @zlf.hookimpl
    def resolve_ops(self, spec, session):
        if spec != "myop":
            return None
        self.calls += 1
        print("RESOLVED BY {who}", flush=True)
        return session.hooks.resolve_ops("ops.py::tiny_op", session)
"""


def test_fresh_process_rebuilds_the_plugin_module_the_caller_used(work, cache):
    """A developer's working copy of a plugin module beside the script shadows an installed (older)
    copy in the caller (script dir first). The fresh process appends the caller's path after its
    own, so by-reference unpickling imports the installed copy: another plugin's code runs, silently.
    Expected: the plugin the caller passed (its module file), or a refusal in one line."""
    installed = work / "site"
    installed.mkdir()
    (installed / "myplug.py").write_text(PLUGIN_MODULE.format(who="INSTALLED OLD COPY"))
    scripts = work / "scripts"
    scripts.mkdir()
    (scripts / "myplug.py").write_text(PLUGIN_MODULE.format(who="CALLER'S COPY"))
    body = INTERPRETED + "import myplug\nprint('CALLER USES', myplug.__file__, flush=True)\n" \
        f"sys.exit(main({_ir(work / 'out', op='myop')}, extra_plugins=[('myplug', myplug.Resolver())]))\n"
    (scripts / "caller.py").write_text(body)
    done = subprocess.run([PY, str(scripts / "caller.py")], cwd=work, env=_env(cache, {"PYTHONPATH": str(installed)}),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert str(scripts / "myplug.py") in done.stdout, done.stdout + done.stderr
    assert "INSTALLED OLD COPY" not in done.stdout + done.stderr
    assert done.returncode == 0 and "RESOLVED BY CALLER'S COPY" in done.stdout, done.stdout + done.stderr


def test_a_zlf_py_on_the_callers_path_does_not_shadow_zlf_in_the_fresh_process(work, cache):
    """The caller's sys.path (here with its working directory, '' of ``python -c``) is appended:
    a zlf.py / cloudpickle.py / tabulate.py there is not imported by the fresh process."""
    for name in ("zlf.py", "cloudpickle.py", "tabulate.py"):
        (work / name).write_text("open('SHADOWED_' + __name__, 'w').write('x')\nraise SystemExit(99)\n")
    body = ("import sys\nsys.path.remove('')\n" + INTERPRETED + "sys.path.append('')\n"
            f"sys.exit(main({_ir(work / 'out')}, extra_plugins=[('p', type('P', (), {{}})())]))\n")
    done = subprocess.run([PY, "-c", body], cwd=work, env=_env(cache), capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(work.glob("SHADOWED_*"))


UNPICKLABLE = {
    "socket": "import socket\nheld = socket.socket()\n",
    "generator": "held = (i for i in range(3))\n",
    "lambda_over_generator": "_g = (i for i in range(3))\nheld = lambda: next(_g)\n",
    "open_file": "held = open(__file__)\n",
}


@pytest.mark.parametrize("kind", sorted(UNPICKLABLE))
def test_an_unpicklable_plugin_is_one_line_before_the_child_starts(work, cache, kind):
    body = INTERPRETED + UNPICKLABLE[kind] + textwrap.dedent(f"""
        import zlf
        class P:
            def __init__(self):
                self.held = held
            @zlf.hookimpl
            def resolve_ops(self, spec, session):
                return None
        sys.exit(main({_ir(work / 'out')}, extra_plugins=[('holder', P())]))
    """)
    done = _script(work, cache, body)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "extension 'holder' passed to main()" in lines[0], done.stderr
    assert not (work / "out").exists()


def test_a_plugin_whose_rebuild_exits_is_refused_not_a_silent_success(work, cache):
    """A plugin the fresh process cannot rebuild is one line and exit 2 (docs/ir.md). One whose
    rebuild raises SystemExit (a module that exits on import, a __reduce__ calling sys.exit) is
    outside ``except Exception``: the fresh process exits 0 having compiled nothing, and the
    caller passes exit 0 on as a success."""
    body = INTERPRETED + textwrap.dedent(f"""
        class P:
            def __reduce__(self):
                return (sys.exit, (0,))
        sys.exit(main({_ir(work / 'out')}, extra_plugins=[('quitter', P())]))
    """)
    done = _script(work, cache, body)
    assert not (done.returncode == 0 and not (work / "out").exists()), "exit 0 and nothing compiled"




def test_plugin_hooks_mutate_a_copy_and_pickling_runs_once(work, cache):
    body = INTERPRETED + textwrap.dedent(f"""
        import zlf
        class P:
            pickled = 0
            def __init__(self):
                self.calls = 0
            def __getstate__(self):
                type(self).pickled += 1
                return dict(self.__dict__)
            @zlf.hookimpl
            def resolve_ops(self, spec, session):
                if spec != "myop":
                    return None
                self.calls += 1
                print("CALLS IN FRESH", self.calls, flush=True)
                return session.hooks.resolve_ops("ops.py::tiny_op", session)
        p = P()
        rc = main({_ir(work / 'out', op='myop')}, extra_plugins=[('counter', p)])
        print("RC", rc, "CALLER CALLS", p.calls, "PICKLED", P.pickled)
    """)
    done = _script(work, cache, body)
    assert "RC 0 CALLER CALLS 0 PICKLED 1" in done.stdout, done.stdout + done.stderr
    assert "CALLS IN FRESH 1" in done.stdout


def test_a_huge_plugin_goes_along(work, cache):
    body = INTERPRETED + textwrap.dedent(f"""
        import zlf
        class P:
            def __init__(self):
                self.blob = os.urandom(24 * 1024 * 1024)
            @zlf.hookimpl
            def resolve_ops(self, spec, session):
                if spec != "myop":
                    return None
                print("BLOB", len(self.blob), flush=True)
                return session.hooks.resolve_ops("ops.py::tiny_op", session)
        sys.exit(main({_ir(work / 'out', op='myop')}, extra_plugins=[('big', P())]))
    """)
    done = _script(work, cache, body)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"BLOB {24 * 1024 * 1024}" in done.stdout


def test_in_process_path_keeps_unpicklable_plugins_and_never_pickles(work, cache):
    """TRITON_INTERPRET unset: zlf ir runs in-process; a plugin with a lock works, and nothing is
    pickled (a __reduce__ with a side effect never runs)."""
    body = textwrap.dedent(f"""
        import sys, threading, zlf
        from zlf.cli import main
        class P:
            def __init__(self):
                self.lock = threading.Lock()
            def __reduce__(self):
                open("PICKLED", "w").write("x")
                raise TypeError("no")
            @zlf.hookimpl
            def resolve_ops(self, spec, session):
                if spec != "myop":
                    return None
                with self.lock:
                    return session.hooks.resolve_ops("ops.py::tiny_op", session)
        sys.exit(main({_ir(work / 'out', op='myop')}, extra_plugins=[('locked', P())]))
    """)
    done = _script(work, cache, body)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run dir: " in done.stdout
    assert not (work / "PICKLED").exists()


def test_fresh_process_output_that_is_not_utf8_is_passed_on(work, cache):
    (work / "ops.py").write_text("import os\nos.write(1, b'caf\\xe9 latin-1 from an op\\n')\n" + OPS)
    done = _script(work, cache, INTERPRETED + f"sys.exit(main({_ir(work / 'out')}))\n")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run dir: " in done.stdout


def test_an_inactive_unpicklable_plugin_does_not_stop_zlf_ir(work, cache):
    """main(['ir', ..., '--ext', 'ir_dump'], extra_plugins=[('locked', P())]): --ext leaves 'locked'
    inactive (not registered, in-process or fresh), so there is nothing to take along."""
    body = INTERPRETED + textwrap.dedent(f"""
        import threading
        class P:
            def __init__(self):
                self.lock = threading.Lock()
        sys.exit(main({_ir(work / 'out', ext=True)}, extra_plugins=[('locked', P())]))
    """)
    done = _script(work, cache, body)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run dir: " in done.stdout


def test_a_refused_target_in_the_fresh_process_is_one_line_and_nothing_written(work, cache):
    """The interpreted caller's zlf ir runs in the fresh process; its preflight line and exit 2
    come back as they are, and no run dir is made."""
    done = _script(work, cache, INTERPRETED + f"sys.exit(main({_ir(work / 'out', target='hip:gfx999')}))\n")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [done.stderr.strip()] and "--target 'hip:gfx999'" in done.stderr, done.stderr
    assert not (work / "out").exists()


def test_the_compilers_diagnostic_is_cleaned_of_terminal_escapes(work, cache):
    done = _patched(work, cache, 'raise RuntimeError("error: \\x1b]0;owned\\x07 \\x1b[31mno such target\\x1b[0m")',
                    _ir(work / "out"))
    assert "RC 2" in done.stdout, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "no such target" in lines[0], done.stderr
    assert not any(c in done.stderr for c in "\x1b\x07"), repr(done.stderr)


#: the compiler, for the probe kernel: says it started, waits for the host's line, then {action}
THREADED_COMPILER = """
import os, time
import triton
real = triton.compile

def _wait_for(name):
    for _ in range(600):
        if os.path.exists(os.path.join({work!r}, name)):
            return
        time.sleep(0.1)

def compile(src, target=None, options=None, **kw):
    if "zlf_target_probe" in repr(getattr(src, "fn", None)) + str(getattr(src, "name", "")):
        open(os.path.join({work!r}, "probe_started"), "w").close()
        _wait_for("host_printed")
        {action}
    return real(src, target=target, options=options, **kw)

triton.compile = compile
"""

THREADED = """
import os, sys, threading, time
from zlf.cli import main

def chatter():  # the host application's own thread, printing while zlf ir compiles the probe
    for _ in range(600):
        if os.path.exists(os.path.join({work!r}, "probe_started")):
            break
        time.sleep(0.1)
    print("HOST THREAD LINE", flush=True)
    open(os.path.join({work!r}, "host_printed"), "w").close()

threading.Thread(target=chatter, daemon=True).start()
rc = main({argv})
print("RC", rc, flush=True)
"""


def _threaded(work, cache, action):
    env = _faulty(work, THREADED_COMPILER, work=str(work), action=action)
    return _script(work, cache, THREADED.format(work=str(work), argv=_ir(work / "out")), env=env)


def test_a_host_threads_output_during_a_failing_probe_is_not_lost(work, cache):
    done = _threaded(work, cache, 'raise RuntimeError("error: unsupported target")')
    assert "RC 2" in done.stdout, done.stdout + done.stderr
    assert "HOST THREAD LINE" in done.stdout, (done.stdout, done.stderr)


def test_a_host_threads_output_during_a_passing_probe_stays_on_stdout(work, cache):
    done = _threaded(work, cache, "pass")
    assert "RC 0" in done.stdout, done.stdout + done.stderr
    assert "HOST THREAD LINE" in done.stdout, (done.stdout, done.stderr)


def test_sigterm_during_the_probe_writes_nothing_and_says_so(work, cache):
    """A SIGTERM while the probe compiles (a hung compiler killed by a timeout(1)): nothing under
    --out, and the process ends as SIGTERM's (143 or the signal) -- not a silent 0."""
    done = _patched(work, cache, "os.kill(int(os.environ['ATK52_ZLF_PID']), signal.SIGTERM); time.sleep(30)",
                    _ir(work / "out"))
    assert done.returncode in (143, -15) or "RC 143" in done.stdout, (done.returncode, done.stdout, done.stderr)
    assert "RC 0" not in done.stdout
    assert not (work / "out").exists()
