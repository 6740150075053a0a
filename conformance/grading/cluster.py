"""Grading on Dask distributed (``--cluster local:N`` or ``--cluster tcp://scheduler:8786``): where the submissions
run for ``conformance.grading.runner.grade``, nothing else (imported only with ``--cluster``; needs the ``cluster``
extra).

A task carries one submission's bytes (a tar archive: the workers need not see the client's disk) and returns its
result as plain JSON-able data. On the Dask worker it is checked exactly as the local grader checks it
(``checking.check_submission``: a process per submission with its limits, the judge apart), forked from the zygote
``Worker`` that the grading run's worker plugin holds in that worker process (started by its first submission,
closed with the run). A task whose worker dies is run again on another worker once (the scheduler's
``allowed-failures``, 1 in ``local_cluster``); after that its row says ``worker lost``."""
import contextlib
import io
import logging
import os
import re
import secrets
import shutil
import tarfile
import threading
from pathlib import Path

import dask
import distributed

from conformance.grading import checking, scratch

LOCAL = re.compile(r"local(?::([1-9]\d*))?")


def local_cluster(workers):
    """A LocalCluster of ``workers`` single-threaded worker processes; a task whose worker dies runs again once. Its
    workers do not sample their own stacks (Dask's profiler: half of an idle worker's CPU time)."""
    with dask.config.set({"distributed.worker.profile.enabled": False}):
        return distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                        dashboard_address=None, silence_logs=logging.ERROR,
                                        scheduler_kwargs={"allowed_failures": 1})


def pack(path):
    """The submission (a file or a folder, links followed) as the bytes of a tar archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", dereference=True) as archive:
        archive.add(path, arcname=path.name)
    return buffer.getvalue()


class Zygotes(distributed.WorkerPlugin):
    """On each Dask worker: the grading run's zygote ``Worker``, started by its first submission (again if it
    ended), closed when the run unregisters the plugin or the worker closes."""

    def __init__(self, pytest_args):
        self.pytest_args = list(pytest_args)

    def setup(self, worker):
        self.worker, self.lock = None, threading.Lock()

    def get(self):
        with self.lock:
            if self.worker is None or self.worker.process.poll() is not None:
                if self.worker is not None:
                    self.worker.close()
                # the environment of a grader without Dask, less what the nanny set for its worker
                # (MALLOC_TRIM_THRESHOLD_=65536 alone makes the checks ~10 % slower)
                dask_only = dask.config.get("distributed.nanny.pre-spawn-environ")
                self.worker = checking.Worker(self.pytest_args, unset=dask_only)
            return self.worker

    def teardown(self, worker):
        if self.worker is not None:
            self.worker.close()


def check_shipped(plugin, name, filename, archive, limits, private):
    """On a Dask worker: unpack the submission and check it (``checking.check_submission``); its result dict."""
    staging = Path(scratch.folder(scratch.SUBMISSION))  # (a prefix that the submissions may not reach)
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(staging, filter="data")
        zygote = distributed.get_worker().plugins[plugin].get()
        return checking.check_submission(zygote, name, staging / filename, limits, private, leftovers=[staging])
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def reraise(exc):
    """A task that fails with ``exc`` (raised on the client before the submission could leave)."""
    raise exc


class Dask(checking.Placement):
    """Submissions checked on Dask: ``local``/``local:N`` starts a LocalCluster of N worker processes (default: one
    per core) for this run; any other value is a scheduler's address."""
    as_completed = staticmethod(distributed.as_completed)

    def __init__(self, address, pytest_args):
        local = LOCAL.fullmatch(address)
        self.cluster = None
        try:
            if local:
                self.cluster = local_cluster(int(local[1] or os.cpu_count() or 1))
            self.client = distributed.Client(self.cluster or address, timeout="30s")
        except (OSError, ValueError, RuntimeError) as exc:  # unreachable, not an address, workers that cannot start
            if self.cluster is not None:
                self.cluster.close()
            raise checking.SetupError(f"cannot use the Dask cluster {address!r}: {exc}") from None
        self.plugin = f"conformance-zygotes-{secrets.token_hex(4)}"  # this run's own: runs may share a cluster
        self.client.register_plugin(Zygotes(pytest_args), name=self.plugin)

    def submit(self, name, path, limits, private):
        try:
            archive = pack(path)
        except OSError as exc:  # (a broken link, say: the submission's row names it, as without a cluster)
            return self.client.submit(reraise, OSError(f"cannot read the submission: {exc}"), pure=False)
        return self.client.submit(check_shipped, self.plugin, name, path.name, archive, limits, private, pure=False)

    def failure(self, exc):
        if isinstance(exc, distributed.KilledWorker):
            return "worker lost", (f"the Dask worker checking it died, on each of {exc.allowed_failures + 1} tries "
                                   "(not graded; checked again by the next run)")
        return super().failure(exc)

    def close(self):
        with contextlib.suppress(OSError, ValueError):  # (a worker gone meanwhile: its zygote went with it)
            self.client.unregister_worker_plugin(self.plugin)  # this run's zygotes end
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
