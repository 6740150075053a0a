"""The grader's scratch folders in the temporary directory, and their cleanup when a grader dies.

Each folder is named ``<kind>-<pid>-<random>``: ``grade-`` for a submission's run (its copy, its reports, the judge's
folder; the prefix that a submission may not reach, see ``conformance.grading.integrity``) and ``grader-worker-``
for a zygote's home. The pid is the process that removes it when it is done; a folder whose process is gone (a
Dask worker or a zygote killed with SIGKILL) is swept by the next grader that starts (:func:`sweep`). A zygote also
watches its grader and ends its checks when the grader dies (:func:`die_with_parent`,
``conformance.grading.zygote``), so that nothing keeps running for a grader no one waits for.
"""
import ctypes
import os
import re
import shutil
import signal
import tempfile

SUBMISSION, WORKER = "grade", "grader-worker"
OWNED = re.compile(rf"(?:{SUBMISSION}|{WORKER})-(\d+)-")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def folder(kind):
    """A new scratch folder of ``kind`` (SUBMISSION or WORKER) owned by this process."""
    return tempfile.mkdtemp(prefix=f"{kind}-{os.getpid()}-")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def sweep(where=None):
    """Remove the scratch folders under ``where`` (the temporary directory) that this user's processes left when
    they died; the names of those removed."""
    where = where or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(where))
    except OSError:
        return removed
    for entry in entries:
        owner = OWNED.match(entry.name)
        try:
            mine = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid()
        except OSError:
            continue
        if owner and mine and not alive(int(owner[1])):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
    return removed


def die_with_parent(sig=signal.SIGKILL):
    """Ask Linux to send ``sig`` to this process when the thread that forked it dies (``prctl PR_SET_PDEATHSIG``);
    elsewhere nothing (the zygote's own poll of its parent remains). True when armed."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
