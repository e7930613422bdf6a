"""``train.num_threads: 0`` (auto): the idle cores when a run starts, and a resume keeps the run's count.

* the rule on known inputs (``threads_for``, also its doctest);
* ``idle_cores`` sees cores taken: with a spinning process on every core of this process's affinity,
  less than half a core reads idle, and the rule gives one thread;
* a run checkpointed with a count that auto does not pick here, resumed with ``train.num_threads=0``,
  takes the run's count (said in ``resume.log``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import torch

from marl_ppo.run.threads import auto_threads, idle_cores, threads_for
from marl_ppo.run.trainer import Trainer


def test_the_rule_keeps_between_one_and_torchs_default():
    assert threads_for(2.0, 2) == 2 and threads_for(0.0, 2) == 1 and threads_for(0.6, 2) == 1
    assert threads_for(3.4, 8) == 3 and threads_for(12.0, 8) == 8 and threads_for(None, 6) == 6


def test_busy_cores_do_not_read_idle():
    cores = len(os.sched_getaffinity(0))
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.5)
        idle = idle_cores(window=0.3)
    finally:
        for p in spinners:
            p.kill()
    assert idle is not None and idle < 0.5, idle
    assert threads_for(idle, torch.get_num_threads()) == 1


def test_a_resume_with_auto_threads_takes_the_runs_own_count(tiny_config, tmp_path):
    threads = torch.get_num_threads()
    own = 3 - auto_threads()  # a count auto does not pick in this process: 1 or 2
    try:
        cfg = tiny_config(overrides=[f"train.num_threads={own}", f"log.root={tmp_path}"])
        run_dir = Trainer(cfg).fit()["run_dir"]
        more = tiny_config(overrides=["train.num_threads=0", "train.total_frames=120", f"log.root={tmp_path}"])
        Trainer(more, run_dir=run_dir, resume=True)  # built with auto's count, then the run's
        assert torch.get_num_threads() == own
        assert f"train.num_threads=0 (auto): {own} threads, as the run had" in open(f"{run_dir}/resume.log").read()
    finally:
        torch.set_num_threads(threads)
