"""The default run's wall time on a quiet and on a busy machine, for train.num_threads 0 (auto), 1 and 2.

Each setting runs ``marl-ppo train train.total_frames=12000`` (the default MAPPO run on VMAS
navigation, no evaluation, no plots) as a subprocess, the settings interleaved within each repeat so
that a slow spell lands on all of them. "Busy": ``--busy N`` other processes each spinning one core
(``while True: pass``) for the whole measurement, as two other one-thread jobs on this machine.
Wall time in seconds, torch and the env imported each time (as a user's command).

    .venv/bin/python examples/benchmarks/threads.py --busy 0 --repeats 3
    .venv/bin/python examples/benchmarks/threads.py --busy 2 --repeats 3
    .venv/bin/python examples/benchmarks/threads.py --quick
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="other processes spinning one core each")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--frames", type=int, default=12_000)
    parser.add_argument("--quick", action="store_true", help="1 200 frames, one repeat")
    parser.add_argument("--threads", type=int, default=None, help="(unused: the settings are what is measured)")
    args = parser.parse_args()
    frames, repeats = (1_200, 1) if args.quick else (args.frames, args.repeats)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    times: dict[int, list[float]] = {0: [], 1: [], 2: []}
    try:
        time.sleep(0.5)
        with tempfile.TemporaryDirectory() as root:
            for _ in range(repeats):
                for threads in times:
                    cmd = [sys.executable, "-m", "marl_ppo", "train", f"train.total_frames={frames}",
                           f"train.num_threads={threads}", f"log.root={root}", "log.progress=false",
                           "log.plot=false", "log.eval_every=0"]  # fmt: skip
                    start = time.perf_counter()
                    subprocess.run(cmd, check=True, capture_output=True)
                    times[threads].append(time.perf_counter() - start)
    finally:
        for p in spinners:
            p.kill()
    print(f"marl-ppo train train.total_frames={frames}, {args.busy} busy core(s), {repeats} repeat(s): wall seconds")
    for threads, values in times.items():
        label = "0 (auto)" if threads == 0 else str(threads)
        listed = ", ".join(f"{v:.1f}" for v in values)
        print(f"  num_threads={label:<9} median {statistics.median(values):6.1f}  ({listed})")


if __name__ == "__main__":
    main()
