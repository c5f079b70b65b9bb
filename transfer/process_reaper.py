"""Processes this one started, ended when it dies, however it dies (SIGKILL included).

A local Ray instance that ``ray.init`` starts is fate-shared with its driver only in part: after
a SIGKILL of the driver its GCS server and raylet end, but its dashboard and runtime-env agents
wait out a hard-coded 60 s call to the dead GCS before they exit. :func:`reap_on_death` starts
a small watchdog process (the standard library alone: no torch to import) that notes this
process's descendants every second and, once this process has ended, sends each one still
running (the same process: its start time is checked) SIGTERM, then SIGKILL after
``GRACE`` seconds. Linux only (it reads ``/proc``); elsewhere it does nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: seconds the survivors get between SIGTERM and SIGKILL
GRACE = 5.0

_WATCHDOG = r'''
import os, select, signal, sys, time

watched, grace = int(sys.argv[1]), float(sys.argv[2])
me = os.getpid()


def stat(pid):
    rest = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(rest[1]), rest[19]  # parent pid, start time (fields 4 and 22)


def descendants():
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                table[int(name)] = stat(int(name))
            except (OSError, IndexError, ValueError):
                pass
    found, todo = {}, [watched]
    while todo:
        parent = todo.pop()
        for pid, (ppid, start) in table.items():
            if ppid == parent and pid != me and pid not in found:
                found[pid] = start
                todo.append(pid)
    return found


def same(pid, start):
    try:
        return stat(pid)[1] == start
    except (OSError, IndexError, ValueError):
        return False


try:
    fd = os.pidfd_open(watched)
except ProcessLookupError:
    sys.exit(0)
except (AttributeError, OSError):
    fd = None
known = {}
while True:
    if fd is not None:
        if select.select([fd], [], [], 1.0)[0]:
            break
    else:
        time.sleep(1.0)
        if not same(watched, start_of_watched):
            break
    known.update(descendants())
    known = {p: s for p, s in known.items() if same(p, s)}
left = {p: s for p, s in known.items() if same(p, s)}
for sig in (signal.SIGTERM, signal.SIGKILL):
    for pid, start in left.items():
        if same(pid, start):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(same(p, s) for p, s in left.items()):
        time.sleep(0.1)
'''


_started: dict[int, subprocess.Popen] = {}


def reap_on_death() -> subprocess.Popen | None:
    """Start the watchdog of this process's descendants (the module docstring), once per
    process; None where there is no ``/proc`` to read. It runs in a session of its own (a
    Ctrl-C at the terminal is not its business) and ends soon after this process does."""
    if os.getpid() in _started:
        return _started[os.getpid()]
    if not Path(f"/proc/{os.getpid()}/stat").is_file():
        return None
    start = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
    script = _WATCHDOG.replace("start_of_watched", repr(start))
    watchdog = subprocess.Popen([sys.executable, "-S", "-c", script, str(os.getpid()),
                                 str(GRACE)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    _started[os.getpid()] = watchdog
    return watchdog
