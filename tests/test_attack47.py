"""ATTACK atk47: does a test's outcome depend on the tests that ran before it in its process, or on
what the developer's shell exports? (docs/testing.md; the TRITON_INTERPRET fault fixed in
9da6fb6.) Each leak case is a pair of tests run in ONE inner pytest session, in a chosen order,
with the repository's development plugin loaded (``-p zlf_devsession``: the fixture that ends a
test's changes to ``os.environ``); each control runs the later test alone.

Shell cases run an existing test of the suite in an inner session whose environment adds one
variable a developer's shell may export."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT

#: a tiny op with one Triton kernel (1024 elements: cheap on the interpreter and to compile)
OPS = textwrap.dedent('''
    import torch, triton, triton.language as tl, zlf

    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)

    def scale(x, out):
        scale_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)

    def make(shape, dtype, device):
        x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
        return (x, torch.empty_like(x))

    def ref(x, out):
        return x * 2

    scale_op = zlf.Op(name="scale", fn=scale, make_inputs=make, shapes=[(1024,)], dtypes=("float32",),
                      reference=ref, outputs=(1,))
''')

#: test functions of the inner sessions (each writes the op file into its own tmp_path)
INNER_HEAD = textwrap.dedent('''
    import os, subprocess, sys
    from pathlib import Path
    from zlf.cli import main

    OPS = {ops!r}

    def _ops(tmp_path):
        (tmp_path / "ops.py").write_text(OPS)
        return str(tmp_path / "ops.py") + "::scale_op"

    def test_cpu_run_of_the_op_file(tmp_path):
        assert main(["run", _ops(tmp_path), "--backend", "cpu", "--warmup-ms", "0", "--rep-ms", "1",
                     "--out", str(tmp_path / "runs")]) == 0

    def test_cpu_run_of_builtin_add(tmp_path):
        assert main(["run", "add", "--dtype", "float32", "--backend", "cpu", "--warmup-ms", "0", "--rep-ms", "1",
                     "--out", str(tmp_path / "runs")]) == 0

    def test_zlf_ir_of_the_op_file(tmp_path):
        assert main(["ir", _ops(tmp_path), "--target", "cuda:90", "--ext", "ir_dump", "--out", str(tmp_path / "aot")]) == 0
        assert list((tmp_path / "aot").glob("*/ir/1024/scale_kernel/*.ttgir"))

    def test_zlf_ir_of_builtin_add(tmp_path):
        assert main(["ir", "add", "--dtype", "float32", "--target", "cuda:90", "--ext", "ir_dump",
                     "--out", str(tmp_path / "aot")]) == 0
''')


def _inner_env(tmp_path, **extra) -> dict:
    from zlf.testing import installed_extensions
    from zlf_devsession import HERE as DEVTOOLS

    env = {k: v for k, v in os.environ.items()
           if k not in ("TRITON_INTERPRET", "PYTEST_ADDOPTS", "ZLF_EXTENSIONS", "COLUMNS")}
    env.update(ZLF_SPAWN_SERVER="", PYTHONPATH=str(DEVTOOLS), ZLF_NO_PROGRESS="1",
               TRITON_CACHE_DIR=str(tmp_path / "triton_cache"),
               ZLF_DISABLE=",".join(n for n in installed_extensions() if n != "ir_dump"))
    env.update(extra)
    return env


def _inner(tmp_path, *tests) -> subprocess.CompletedProcess:
    """An inner session (no xdist, the development plugin loaded) running ``tests`` in that order."""
    inner = tmp_path / "inner"
    inner.mkdir(exist_ok=True)
    (inner / "test_inner.py").write_text(INNER_HEAD.format(ops=OPS))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:randomly", "-p", "zlf_devsession",
                           *[f"test_inner.py::{t}" for t in tests]],
                          cwd=inner, env=_inner_env(tmp_path), capture_output=True, text=True, timeout=900)


def _passed(proc, n) -> bool:
    return proc.returncode == 0 and f"{n} passed" in proc.stdout


# ----------------------------------------------------------------------------- leaks (in-process)
@pytest.mark.extensions("ir_dump")
def test_leak_control_in_process_zlf_ir_alone_compiles(tmp_path):
    proc = _inner(tmp_path, "test_zlf_ir_of_the_op_file")
    assert _passed(proc, 1), proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.extensions("ir_dump")
def test_leak_in_process_zlf_ir_compiles_after_an_in_process_cpu_run(tmp_path):
    """The devsession fixture ends the cpu backend's TRITON_INTERPRET, but Triton was imported
    while it was set: triton.language stays interpreted for the rest of the worker, and zlf ir
    (run in-process by a later test, as zlf_cli.inprocess does) says 'Triton was imported with
    TRITON_INTERPRET=1 before zlf ir ran (by a plugin)' -- neither a plugin nor the user did."""
    proc = _inner(tmp_path, "test_cpu_run_of_the_op_file", "test_zlf_ir_of_the_op_file")
    assert _passed(proc, 2), proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.extensions("ir_dump")
def test_leak_control_in_process_cpu_run_of_builtin_add_alone_passes(tmp_path):
    proc = _inner(tmp_path, "test_cpu_run_of_builtin_add")
    assert _passed(proc, 1), proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.extensions("ir_dump")
def test_leak_in_process_cpu_run_passes_after_an_in_process_zlf_ir(tmp_path):
    """zlf ir sets Triton's active driver to its fake GPU driver (never reset) and imports the
    built-in ops with JIT kernels; a later in-process `zlf run add --backend cpu` then launches
    those kernels on the fake driver, which runs nothing: every point FAILED 'wrong result
    (output 0): NaN or unwritten elements' (an op without a reference would be timed as a no-op)."""
    proc = _inner(tmp_path, "test_zlf_ir_of_builtin_add", "test_cpu_run_of_builtin_add")
    assert _passed(proc, 2), proc.stdout[-3000:] + proc.stderr[-2000:]


# ----------------------------------------------------------------------------- zlf.testing's zlf_cli.inprocess
PLAIN_SESSION = textwrap.dedent('''
    import subprocess, sys

    def test_a_runs_the_cpu_backend_in_process(zlf_cli, zlf_op_file):
        ops = zlf_op_file("neg", shapes=[(64,)])
        zlf_cli.inprocess("run", f"{ops}::neg", "--backend", "cpu", "--warmup-ms", "0", "--rep-ms", "1",
                          "--out", "runs", check_rc=0)

    def test_b_starts_a_process(zlf_cli):
        seen = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('TRITON_INTERPRET'))"],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert seen == "None"
''')


def test_zlf_cli_inprocess_leaves_no_triton_interpret_in_an_extension_authors_session(tmp_path):
    """An extension author's session (zlf's installed pytest plugin, not this repository's
    development plugin): a test that runs the cpu backend with zlf_cli.inprocess leaves
    TRITON_INTERPRET=1 for every later test and every process they start -- the fault CI hit,
    fixed only in tests/_devtools (which no user has)."""
    inner = tmp_path / "author"
    inner.mkdir()
    (inner / "test_mine.py").write_text(PLAIN_SESSION)
    env = _inner_env(tmp_path)
    env.pop("PYTHONPATH")  # no tests/_devtools: what a user of zlf has
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:randomly", "test_mine.py"], cwd=inner, env=env, capture_output=True, text=True,
                          timeout=600)
    assert _passed(proc, 2), proc.stdout[-3000:] + proc.stderr[-2000:]


# ----------------------------------------------------------------------------- the developer's shell
def _suite_test(nodeid: str, **shell) -> subprocess.CompletedProcess:
    """One test of the repository's suite, run from the checkout as a developer runs it, with
    ``shell`` added to the environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "ZLF_DISABLE", "ZLF_EXTENSIONS")}
    env.update(shell)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:randomly", nodeid], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.extensions("task")
def test_shell_control_the_phase_line_test_passes_in_a_wide_terminal():
    proc = _suite_test("tests/test_cli_language.py::test_task_case_phases_say_what_runs_and_the_time_left",
                       COLUMNS="120")
    assert _passed(proc, 1), proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.extensions("task")
def test_shell_phase_line_test_passes_in_a_narrow_terminal():
    """A developer in a 40-column pane (or a shell that exports COLUMNS=40): the asserted line
    '[2/5] case 2: checking (41 s of 60 s left)' is cut to 39 characters by StatusLine.show
    (core/console.py:_columns), and the test fails."""
    proc = _suite_test("tests/test_cli_language.py::test_task_case_phases_say_what_runs_and_the_time_left",
                       COLUMNS="40")
    assert _passed(proc, 1), proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.extensions("task")
def test_shell_nvcc_phase_test_passes_in_a_narrow_terminal():
    proc = _suite_test("extensions/taskpkg/tests/test_task_progress.py::"
                       "test_nvcc_compile_shows_its_phase_with_the_compile_limit_left", COLUMNS="40")
    assert _passed(proc, 1), proc.stdout[-3000:] + proc.stderr[-2000:]


def test_shell_progress_tty_test_passes_in_a_narrow_terminal():
    """The pty test (a real terminal) keeps its outcome with COLUMNS=40 exported."""
    proc = _suite_test("tests/test_progress_tty.py", COLUMNS="40")
    assert _passed(proc, 1), proc.stdout[-3000:] + proc.stderr[-2000:]


# ----------------------------------------------------------------------------- task packages (sys.path / sys.modules)
PROBLEM = ("from helpers import VALUE\n"
           "def genTestCase(i):\n    return None\n"
           "def getNumOfTestcases():\n    return 1\n"
           "def getTestCaseSize(i):\n    return 1\n"
           "def baseline(*a):\n    return None\n"
           "def check(*a):\n    return True\n")


@pytest.mark.extensions("task")
def test_a_task_package_loaded_after_another_imports_its_own_helpers(tmp_path):
    """load() puts the package folder on sys.path 'for its helpers' and never takes it (nor the
    helper modules) away: a test that loads package B after one that loaded A, in the same worker,
    runs B's problem against A's helpers.py. Here each package's problem module does
    `from helpers import VALUE`; B must see 'b'. (Run in a child, so that this test leaks nothing.)"""
    for name in ("a", "b"):
        pkg = tmp_path / name / "pkg"
        pkg.mkdir(parents=True)
        (pkg / "problem.py").write_text(PROBLEM)
        (pkg / "helpers.py").write_text(f"VALUE = {name!r}\n")
    script = ("from zlf_taskpkg.package import TaskPackage\n"
              "a = TaskPackage.open('a/pkg').load()\n"
              "b = TaskPackage.open('b/pkg').load()\n"
              "print(a.VALUE, b.VALUE)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["a", "b"], done.stdout


# ----------------------------------------------------------------------------- signal dispositions
ALARM_AFTER_A_RUN = textwrap.dedent('''
    import os, signal, sys, time
    from zlf.cli import main

    before = signal.getsignal(signal.SIGALRM)
    assert main(["run", "ops.py::scale_op", "--backend", "cpu", "--warmup-ms", "0", "--rep-ms", "1", "--out", "runs"]) == 0
    print("default before", before == signal.SIG_DFL, "after", signal.getsignal(signal.SIGALRM), flush=True)
    signal.alarm(1)  # a later test's hang guard: SIGALRM's default action ends the process
    time.sleep(5)
    print("survived the alarm", flush=True)
''')


def test_an_in_process_run_gives_back_the_sigalrm_disposition(tmp_path):
    """core/procs.py PointWatch.__init__ installs its SIGALRM handler and nothing restores the
    previous one when the run ends: in a test worker (zlf_cli.inprocess, cli.main) every later
    test -- and any alarm-based guard it arms -- sees zlf's handler, which ignores an alarm it did
    not arm. Here a later `signal.alarm(1)` should kill the process (default action); it survives."""
    from zlf.testing import clean_env, core_only_env

    (tmp_path / "ops.py").write_text(OPS)
    (tmp_path / "script.py").write_text(ALARM_AFTER_A_RUN)
    env = clean_env({**core_only_env(), "ZLF_CACHE_DIR": str(tmp_path / "cache"),
                     "TRITON_CACHE_DIR": str(tmp_path / "triton_cache")})
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, preexec_fn=lambda: __import__("signal").signal(14, __import__("signal").SIG_DFL))
    assert "default before True" in done.stdout, done.stdout + done.stderr
    assert done.returncode == -14 and "survived" not in done.stdout, done.stdout + done.stderr[-2000:]


def _long_tmpdir(tmp_path, length: int) -> str:
    """A fresh folder to export as TMPDIR, its path ``length`` characters long (or one more than
    this test's own tmp_path): what a scratch folder on a cluster node or in a CI job looks like."""
    base = str(tmp_path / "t")
    folder = base + "x" * max(1, length - len(base))
    os.makedirs(folder)
    return folder


def test_shell_hostile_input_socket_case_passes_with_a_long_tmpdir(tmp_path):
    """TMPDIR exported to a fresh 64-character folder: pytest's tmp_path of this test is then
    ~110 characters, and binding the test's AF_UNIX socket there raises 'AF_UNIX path too long'."""
    proc = _suite_test("tests/test_hostile_input.py::test_compare_refuses_a_meta_json_that_is_no_regular_file",
                       TMPDIR=_long_tmpdir(tmp_path, 64))
    assert _passed(proc, 4), proc.stdout[-3000:] + proc.stderr[-2000:]


def test_shell_spawn_server_tests_pass_with_a_long_tmpdir(tmp_path):
    """TMPDIR exported to a fresh 80-character folder: the session's own spawn server quietly does
    not start (as documented), but the module's `server` fixture asserts it did, so every test of
    tests/test_spawn_server.py that uses it errors."""
    proc = _suite_test("tests/test_spawn_server.py::"
                       "test_a_forked_child_has_its_callers_arguments_directory_environment_descriptors_and_exit",
                       TMPDIR=_long_tmpdir(tmp_path, 80))
    assert _passed(proc, 1), proc.stdout[-3000:] + proc.stderr[-2000:]


# ----------------------------------------------------------------------------- module-scoped fixtures
MODULE_FIXTURE = textwrap.dedent('''
    import pytest

    @pytest.fixture(scope="module")
    def cpu_ready():
        from zlf.backends.cpu import CpuBackend
        CpuBackend(0).setup()  # what an in-process `zlf run/task --backend cpu` does first
        yield

    def test_a_uses_the_cpu_backend(cpu_ready):
        pass
''')

LATER_MODULE = textwrap.dedent('''
    import os, subprocess, sys

    def test_b_sees_the_sessions_environment():
        child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('TRITON_INTERPRET'))"],
                               capture_output=True, text=True, check=True).stdout.strip()
        assert (os.environ.get("TRITON_INTERPRET"), child) == (None, "None")
''')


def test_an_environment_change_made_in_a_module_fixture_ends_with_the_module(tmp_path):
    """The fix restores os.environ per test, to what it was when the test's setup began -- after
    its module-scoped fixtures ran. A module fixture that runs the cpu backend in-process (as
    extensions/taskpkg/tests/test_attack41_cheats.py::probe_run does with `zlf task`) sets
    TRITON_INTERPRET=1, and every later test on that worker, in any module, and every process it
    starts, inherits it: the CI fault again, one scope up."""
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_one.py").write_text(MODULE_FIXTURE)
    (inner / "test_two.py").write_text(LATER_MODULE)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:randomly", "-p", "zlf_devsession", "test_one.py", "test_two.py"],
                          cwd=inner, env=_inner_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert _passed(proc, 2), proc.stdout[-3000:] + proc.stderr[-2000:]
