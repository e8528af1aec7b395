"""Long-lived worker processes for test cases that may abort or crash the interpreter.

A framework that aborts (torch's ``c10::Error`` escaping into ``std::terminate``, SIGABRT) or a
reader that dereferences a wild pointer (SIGSEGV) would take the whole pytest run down if the
case ran in the test process.  :class:`SubprocessPool` runs each case in a worker process
instead: a worker that dies is reported as :class:`WorkerDied` (naming the signal and carrying
the tail of the worker's stderr, where ``faulthandler`` and the framework wrote what happened)
and is replaced, and the run goes on.

Workers come from the ``forkserver`` start method with numpy, torch and jax imported once in the
server (never initialised there: no jax backend, no torch threads), so that replacing a worker
costs a fork, not seconds of imports.  Tasks are module-level functions (sent by reference, as
pickle does) and their picklable arguments; a task's exception comes back as
:class:`TaskError` with the worker's traceback.
"""

from __future__ import annotations

import faulthandler
import gc
import importlib.util
import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

__all__ = ["PRELOAD", "SubprocessPool", "TaskError", "WorkerDied", "WorkerTimeout"]

_TESTS = str(Path(__file__).resolve().parent)

#: Imported once by the fork server, so that every worker starts with them (those installed).
PRELOAD = tuple(name for name in ("numpy", "interop_core", "torch", "jax", "jax.numpy",
                                  "hypothesis", "pytest", "dlpack_ctypes")
                if name == "dlpack_ctypes" or importlib.util.find_spec(name.split(".")[0]))


class WorkerDied(Exception):
    """The worker running a task died (a signal or an exit) before answering."""

    def __init__(self, task, exitcode, stderr_tail):
        self.task = task
        self.exitcode = exitcode
        self.stderr_tail = stderr_tail
        if exitcode is not None and exitcode < 0:
            try:
                how = f"killed by {signal.Signals(-exitcode).name}"
            except ValueError:
                how = f"killed by signal {-exitcode}"
        else:
            how = f"exited with status {exitcode}"
        super().__init__(f"the worker process running {task} {how}; its stderr ended with:\n"
                         f"{stderr_tail or '(nothing)'}")


class WorkerTimeout(Exception):
    """A task ran past its time limit (its worker was killed and replaced)."""


class TaskError(Exception):
    """A task raised in its worker: the exception's type name, message and traceback."""

    def __init__(self, type_name, message, remote_traceback):
        self.type_name = type_name
        self.message = message
        self.remote_traceback = remote_traceback
        super().__init__(f"{type_name}: {message}\n--- in the worker ---\n{remote_traceback}")


def _describe(function, args):
    text = f"{function.__module__}.{function.__qualname__}{args!r}"
    return text if len(text) < 2000 else text[:2000] + "...)"


def _worker_main(connection, stderr_path, environment):
    # Everything the worker writes to fd 2 (faulthandler, C++ terminate messages, warnings)
    # goes to a file the parent reads when the worker dies; it is emptied before each task.
    stderr_fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(stderr_fd, 2)
    os.close(stderr_fd)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    # An aborting case is expected here: no core dump to write (that takes seconds each).
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.environ.update(environment)
    if _TESTS not in sys.path:
        sys.path.insert(0, _TESTS)
    # The preloaded frameworks' objects never become garbage: left out of every collection,
    # they no longer make each gc.collect() of a case cost a fifth of a second.
    gc.freeze()
    # Several workers share the machine with the test process: torch's intra-op threads would
    # only contend (a 256 KiB fill took 14 ms instead of 0.1 ms on a loaded 2-core machine).
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        function, args = message
        sys.stderr.flush()
        os.ftruncate(2, 0)
        os.lseek(2, 0, os.SEEK_SET)
        try:
            answer = ("ok", function(*args))
        except BaseException as exc:  # noqa: BLE001  (every failure goes back to the parent)
            answer = ("error", type(exc).__name__, str(exc), traceback.format_exc())
        try:
            connection.send(answer)
        except Exception as exc:  # an unpicklable result
            connection.send(("error", type(exc).__name__, f"cannot send the result: {exc}",
                             traceback.format_exc()))


class _Worker:
    def __init__(self, context, environment):
        handle, self.stderr_path = tempfile.mkstemp(prefix="interop-core-worker-", suffix=".err")
        os.close(handle)
        # The parent's end of the pipe (the child's end is closed here once the child has it);
        # the process object is this pool's, which joins or kills it in stop().
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_worker_main,
                                       args=(child, self.stderr_path, environment), daemon=True)
        self.process.start()
        child.close()

    def stderr_tail(self, limit=6000):
        try:
            with open(self.stderr_path, errors="replace") as f:
                text = f.read()
        except OSError:
            return ""
        return text[-limit:]

    def stop(self, kill=False):
        if self.process.is_alive():
            if kill:
                self.process.kill()
            else:
                try:
                    self.connection.send(None)
                except OSError:
                    pass
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.connection.close()
        try:
            os.unlink(self.stderr_path)
        except OSError:
            pass


class SubprocessPool:
    """Worker processes that run test cases; a dead worker fails its case and is replaced.

    Parameters
    ----------
    size : int
        Number of workers (tasks run in parallel up to this many).
    environment : dict, optional
        Variables set in each worker before its first task (``NUMBA_ENABLE_CUDASIM``, say);
        the test process's own environment is left alone.
    timeout : float
        Default seconds a task may run before its worker is killed (:class:`WorkerTimeout`).
    """

    def __init__(self, size=2, environment=None, timeout=60.0):
        self._context = multiprocessing.get_context("forkserver")
        # Takes effect when the fork server starts (the first pool of the process).
        self._context.set_forkserver_preload(list(PRELOAD))
        self._environment = dict(environment or {})
        self._timeout = timeout
        # The workers are this pool's own: replaced when they die, stopped by close().
        self._workers = [_Worker(self._context, self._environment) for _ in range(size)]
        #: Workers that died so far (each replaced).
        self.deaths = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Stop every worker."""
        for worker in self._workers:
            worker.stop()
        self._workers = []

    def _replace(self, worker):
        index = self._workers.index(worker)
        worker.stop(kill=True)
        self._workers[index] = _Worker(self._context, self._environment)

    def map(self, function, arglists, timeout=None):
        """Run ``function(*args)`` for each args in ``arglists``, in parallel over the workers.

        Returns
        -------
        list
            Per task, in order: its return value, or the :class:`WorkerDied`,
            :class:`WorkerTimeout` or :class:`TaskError` instance that stands for its failure
            (returned, not raised, so that one task's crash does not hide the others').
        """
        timeout = self._timeout if timeout is None else timeout
        pending = list(enumerate(arglists))[::-1]
        results = [None] * len(pending)
        running = {}                    # worker -> (task index, description, deadline)
        while pending or running:
            for worker in self._workers:
                if worker not in running and pending:
                    index, args = pending.pop()
                    description = _describe(function, tuple(args))
                    try:
                        worker.connection.send((function, tuple(args)))
                    except (BrokenPipeError, OSError):
                        pending.append((index, args))
                        self.deaths += 1
                        self._replace(worker)
                        break
                    running[worker] = (index, description, time.monotonic() + timeout)
            if not running:
                continue
            waitables = {}
            for worker in running:
                waitables[worker.connection] = worker
                waitables[worker.process.sentinel] = worker
            soonest = min(deadline for _, _, deadline in running.values())
            ready = multiprocessing.connection.wait(
                list(waitables), timeout=max(0.0, soonest - time.monotonic()))
            finished = {waitables[r] for r in ready}
            now = time.monotonic()
            for worker in list(running):
                index, description, deadline = running[worker]
                if worker in finished:
                    try:
                        answer = worker.connection.recv()
                    except (EOFError, OSError):
                        worker.process.join(5)
                        results[index] = WorkerDied(description, worker.process.exitcode,
                                                    worker.stderr_tail())
                        self.deaths += 1
                        self._replace(worker)
                    else:
                        results[index] = (answer[1] if answer[0] == "ok"
                                          else TaskError(*answer[1:]))
                    del running[worker]
                elif now >= deadline:
                    results[index] = WorkerTimeout(
                        f"{description} ran past {timeout} s; its stderr ended with:\n"
                        f"{worker.stderr_tail()}")
                    self._replace(worker)
                    del running[worker]
        return results

    def run(self, function, *args, timeout=None):
        """Run one task; return its value, or raise what stands for its failure."""
        (result,) = self.map(function, [args], timeout=timeout)
        if isinstance(result, (WorkerDied, WorkerTimeout, TaskError)):
            raise result
        return result
