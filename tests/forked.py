"""``python -m pytest ARGS`` for the tests, each run a fresh process forked from one that has already imported
torch and pytest: the same isolation as a subprocess (nothing a run does reaches the next), without the
two to four seconds of imports each of the few hundred suite runs of ``pytest tests`` would pay again.

One server per test process (each xdist worker has its own), started at the first run by ``multiprocessing``'s
forkserver. A run's child takes the command's working directory, environment (``PYTHONPATH`` put on its path, as a
new interpreter would) and thread count, sends its output to a file and ends with pytest's exit status; a run past
its time is killed and raises ``subprocess.TimeoutExpired`` as ``subprocess.run`` would. ``SUITE_FORKS=0`` runs
each command as a plain subprocess instead.
"""
import multiprocessing
import os
import subprocess
import sys
import tempfile

PRELOADED = ["torch", "numpy", "pytest"]
"""Imported once in the server: third-party packages whose import reads no setting of a run, and no pytest plugin
(pytest would warn that it cannot rewrite one already imported)."""
CONTEXT = None


def context():
    """The forkserver context, its server preloading :data:`PRELOADED` (started at the first run)."""
    global CONTEXT
    if CONTEXT is None:
        CONTEXT = multiprocessing.get_context("forkserver")
        CONTEXT.set_forkserver_preload(PRELOADED)
    return CONTEXT


def pytest_in_this_child(arguments, cwd, env, output_path):
    """The child's work: ``python -m pytest arguments`` run in ``cwd`` with ``env``, its output to ``output_path``."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p] + [cwd]  # (as ``-m`` puts the cwd)
    sys.argv = [sys.executable, "-m", "pytest", *arguments]
    output = os.open(output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(output, 1)
    os.dup2(output, 2)
    import torch
    torch.set_num_threads(int(env.get("OMP_NUM_THREADS") or os.cpu_count() or 1))
    import pytest
    try:
        code = int(pytest.main(list(arguments)))
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    except BaseException:  # noqa: BLE001 (reported as a crashed interpreter would)
        import traceback
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_pytest(arguments, cwd, env, timeout):
    """``(exit status, stdout and stderr)`` of ``python -m pytest arguments`` run in ``cwd`` with ``env``."""
    if os.environ.get("SUITE_FORKS", "1") == "0":
        done = subprocess.run([sys.executable, "-m", "pytest", *arguments], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout)
        return done.returncode, done.stdout + done.stderr
    with tempfile.NamedTemporaryFile(prefix="pytest-run-", suffix=".out") as output:
        child = context().Process(target=pytest_in_this_child, args=(list(arguments), str(cwd), dict(env),
                                                                     output.name))
        child.start()
        child.join(timeout)
        if child.is_alive():
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired([sys.executable, "-m", "pytest", *arguments], timeout)
        with open(output.name, encoding="utf-8", errors="replace") as f:
            return child.exitcode, f.read()
