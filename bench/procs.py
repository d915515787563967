"""The processes of a local cluster (`switchyard up`), read from /proc: who they are and
what they have used."""

from __future__ import annotations

import os
import pathlib
import subprocess
import time
from collections.abc import Iterator


def children(parent_pid: int) -> Iterator[tuple[str, str]]:
    """(pid, role) of each child of `parent_pid` (a `switchyard up`): rm, proxy, worker,
    or sim for a process of simulated hosts."""
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(parent_pid)], capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        pid, args = line.split(None, 1)
        words = args.split()
        yield pid, "sim" if "--simulate" in words else (words[1] if len(words) > 1 else args)


def cpu_seconds_of(stat_path: str | pathlib.Path) -> float:
    """User + system CPU seconds from a /proc stat file (a process's or a thread's)."""
    fields = pathlib.Path(stat_path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def settled(pid: int, seconds: float = 60, still_s: float = 10) -> int:
    """The RSS once it has not fallen by a MiB for `still_s` (at most `seconds`)."""
    deadline = time.monotonic() + seconds
    low, since = rss(pid), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < still_s:
        time.sleep(0.5)
        if (now := rss(pid)) < low - (1 << 20):
            low, since = now, time.monotonic()
    return min(low, rss(pid))
