"""How many CPU threads torch computes with, chosen again at each step from how busy the machine is.

torch's OpenMP worker threads spin for a while after each parallel region before they sleep. On a
machine the trainer has to itself, that spin is what makes a decode step fast: a token of 16 rows
of SmolLM2 on two cores takes about 1.5 times longer with ``OMP_WAIT_POLICY=PASSIVE``. On a machine
where another busy process holds a core, a spinning thread waits for a partner that is not running
and every step takes many times longer (measured: 80 s instead of 12 s for 16 x 64 tokens, two
generating processes on two cores). One thread has no partner to wait for. So the trainer uses all
its threads while the rest of the machine is idle and fewer when it is busy, decided from the CPU
time the machine and this process spent since the last decision (docs/performance.md#cpu-threads).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import torch

# The rest of the machine counts as busy from this many cores' worth of CPU time: a web server
# answering a trainer's batches once a second stays well below it; a second trainer does not.
BUSY_CORES = 0.25
# Decisions over shorter spans would follow the noise of single bursts.
MIN_INTERVAL_S = 1.0
_PROC_STAT = "/proc/stat"
# Fields of /proc/stat's "cpu" line that are work: user, nice, system, irq, softirq (guest time is
# counted in user already; idle, iowait and steal are not work done here).
_BUSY_FIELDS = (0, 1, 2, 5, 6)


def machine_busy_seconds(path: str = _PROC_STAT) -> float | None:
    """CPU seconds every core of the machine has spent working since boot; None off Linux."""
    try:
        with open(path, encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(value) for value in fields[1:]]
    return sum(ticks[i] for i in _BUSY_FIELDS if i < len(ticks)) / os.sysconf("SC_CLK_TCK")


def threads_for(others_busy_cores: float, cores: int, most: int) -> int:
    """All ``most`` threads while the rest of the machine is idle; else what it leaves free, at least one."""
    if others_busy_cores < BUSY_CORES:
        return most
    return max(1, min(most, math.floor(cores - others_busy_cores + BUSY_CORES)))


@dataclass
class _Sample:
    wall_s: float
    machine_busy_s: float
    own_cpu_s: float


def _sample() -> _Sample | None:
    busy = machine_busy_seconds()
    return None if busy is None else _Sample(time.monotonic(), busy, time.process_time())


class ThreadBudget:
    """torch's intra-op thread count for this process, at most ``most``.

    OpenMP keeps one thread count per calling thread, so a thread that runs torch work (the
    generation engine's worker) calls :meth:`refresh` itself before it starts.
    """

    def __init__(self, most: int) -> None:
        self.most = max(1, most)
        self.cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.threads = self.most
        self._last = _sample()

    def refresh(self) -> int:
        """Decide again from the time since the last decision (when long enough), and apply it here."""
        now = _sample()
        last = self._last
        if now is not None and last is not None and now.wall_s - last.wall_s >= MIN_INTERVAL_S:
            wall = now.wall_s - last.wall_s
            others = (now.machine_busy_s - last.machine_busy_s - (now.own_cpu_s - last.own_cpu_s)) / wall
            self.threads = threads_for(others, self.cores, self.most)
            self._last = now
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        return self.threads
