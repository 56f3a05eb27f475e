"""Worker processes that never outlive the command, and signals as exceptions.

A sweep and a procurement run their points on a process pool. On SIGINT or SIGTERM the
parent stops the workers (it does not wait for their solves), saves what is done and exits
128 + the signal number with one line; when the parent dies without cleaning up (SIGKILL),
each worker dies with it: ``PR_SET_PDEATHSIG`` on Linux, and everywhere a thread that
waits on the parent's sentinel (a pipe whose write end only the parent holds).

Imports only the standard library: the CLI, the sweep and the procurement use it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing.context import BaseContext
from types import FrameType
from typing import Any

#: prctl(2) option: the signal a process gets when its parent (the thread that forked it)
#: exits (linux/prctl.h)
_PR_SET_PDEATHSIG = 1
#: a worker's exit status when it stops because its parent is gone
ORPHAN_EXIT = 1


class Interrupted(BaseException):
    """SIGINT or SIGTERM in the CLI. A ``BaseException`` like ``KeyboardInterrupt``, so that
    no ``except Exception`` swallows it, but not a ``KeyboardInterrupt``, which click would
    turn into "Aborted!" and exit 1."""

    def __init__(self, signum: int, message: str = "interrupted") -> None:
        super().__init__(message)
        self.signum = signum
        self.message = message

    @property
    def exit_code(self) -> int:
        """The shell's convention for death by a signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


#: what an interrupt looks like: Ctrl-C in a script (KeyboardInterrupt) or in the CLI
INTERRUPTS = (KeyboardInterrupt, Interrupted)


def with_message(exc: BaseException, message: str) -> BaseException:
    """The interrupt ``exc`` again, saying ``message`` (what was saved, how to resume)."""
    if isinstance(exc, Interrupted):
        return Interrupted(exc.signum, message)
    return KeyboardInterrupt(message)


def _raise(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextmanager
def signals_raise(*signums: int) -> Iterator[None]:
    """Inside, each of ``signums`` raises :class:`Interrupted` in the main thread (a no-op
    in another thread, where Python cannot set handlers). The handlers before are restored
    on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, _raise) for s in signums}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _die_with_parent() -> None:
    """A worker's initializer: ignore SIGINT (Ctrl-C reaches the whole process group; the
    parent decides and stops the workers) and exit when the parent process is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    if not parent.is_alive():  # it died before prctl: no signal will come
        os._exit(ORPHAN_EXIT)
    threading.Thread(target=_exit_when_closed, args=(parent.sentinel,), daemon=True,
                     name="planner-parent-watch").start()


def _exit_when_closed(sentinel: int) -> None:
    from multiprocessing.connection import wait

    wait([sentinel])
    os._exit(ORPHAN_EXIT)


class WorkerPool(ProcessPoolExecutor):
    """A process pool whose workers die with the parent, and are stopped, not waited for,
    when the ``with`` block raises (an interrupt, or an input error from one point)."""

    def __init__(self, max_workers: int | None, mp_context: BaseContext) -> None:
        super().__init__(max_workers=max_workers, mp_context=mp_context,
                         initializer=_die_with_parent)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is None:
            self.shutdown(wait=True)
        else:
            self.stop()
        return False

    def stop(self) -> None:
        """Kill the workers, then shut the pool down: the pool's manager thread sees them
        gone and fails the futures still pending. Futures are never cancelled from here:
        Python 3.11's manager then sets an exception on a cancelled future and prints
        ``InvalidStateError`` from its thread."""
        procs = list((getattr(self, "_processes", None) or {}).values())
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(timeout=5.0)
        self.shutdown(wait=True, cancel_futures=True)
