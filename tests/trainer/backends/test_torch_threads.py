"""The torch backend's CPU thread count: all threads on an idle machine, fewer beside busy processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from trainer.backends.torch.threads import BUSY_CORES, ThreadBudget, machine_busy_seconds, threads_for


def test_an_idle_machine_gets_every_thread() -> None:
    assert threads_for(0.0, cores=2, most=2) == 2
    assert threads_for(BUSY_CORES / 2, cores=16, most=8) == 8


def test_a_busy_machine_leaves_what_is_free_and_at_least_one() -> None:
    assert threads_for(1.0, cores=2, most=2) == 1  # a second trainer on a two-core laptop
    assert threads_for(2.0, cores=2, most=2) == 1
    assert threads_for(4.0, cores=16, most=16) == 12
    assert threads_for(4.0, cores=16, most=8) == 8


def test_it_reads_the_busy_time_from_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    ticks = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal: idle, iowait and steal are not work here
    stat.write_text(f"cpu  {ticks} {ticks} {ticks} 999999 999 {ticks} {ticks} 777 0 0\ncpu0 1 2 3\n")
    assert machine_busy_seconds(str(stat)) == pytest.approx(5.0)
    assert machine_busy_seconds(str(tmp_path / "missing")) is None


def test_it_drops_threads_while_other_processes_keep_the_cores_busy() -> None:
    budget = ThreadBudget(2)
    cores = budget.cores
    burn = "import time\nend = time.monotonic() + 3\nwhile time.monotonic() < end: pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(max(cores, 2))]
    try:
        time.sleep(1.5)
        assert budget.refresh() == 1
        assert torch.get_num_threads() == 1
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    torch.set_num_threads(budget.most)
