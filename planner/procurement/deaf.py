"""Imported first by the procurement's forkserver (its preload), and only there: Ctrl-C
reaches the whole process group, and a KeyboardInterrupt landing while the forkserver imports
its preload, or in a worker it forked before the worker's initializer ran, printed a
traceback. Ignoring SIGINT here makes the forkserver ignore it from then on, and its workers
are born ignoring it (the forkserver's children restore the handlers it had before its main
loop: these). The parent alone decides on Ctrl-C (planner/workers.py)."""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
