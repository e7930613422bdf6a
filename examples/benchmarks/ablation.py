"""One ingredient at a time: variants of a shipped config, 3 seeds each in one process, then each seed's final
policy evaluated greedy and sampled (100 episodes each) beside its training return. The LBF ablation of
``docs/recipes.md`` ("The ablation"); ``configs/suites/lbf_ablation.yaml`` is the same runs as a suite.

Each variant is one ``marl-ppo train CONFIG train.seeds=[...] OVERRIDES`` child process (one thread; ``--jobs``
at a time). Per seed it writes one CSV row: the team return (LBF: the sum over the agents of their episode
returns, the raw env rewards, whatever the reward table trains on) over the last 10 % of the training batches,
and the final checkpoint's greedy and sampled returns (``marl-ppo eval RUN --episodes 100``, which reports both);
then a markdown table of the means.

    .venv/bin/python examples/benchmarks/ablation.py --frames 1000000 --out /tmp/ablation --csv /tmp/ablation.csv
    .venv/bin/python examples/benchmarks/ablation.py --variants base,team --frames 1000000 --out /tmp/ablation
    .venv/bin/python examples/benchmarks/ablation.py --quick                  # smoke: two variants, 2 000 frames
    .venv/bin/python examples/benchmarks/ablation.py --evaluate-only --out /tmp/ablation   # runs already trained
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEAM = "reward_table={agents: {reward: [{team: [agents], reduce: sum}], done: root}}"
# the shipped config's departures towards the EPyMARL paper's tuned MAPPO (its Table 24), one at a time, then some
# of them together; "base" is the shipped config of the commit before the LBF configs trained on the team's reward
VARIANTS = {
    "base": ["reward_table=null"],
    "ent001": ["reward_table=null", "loss.entropy_coeff=0.001"],
    "team": [TEAM],
    "terminal": ["reward_table=null", "env.time_limit=terminate"],
    "nonorm": ["reward_table=null", "loss.normalize_advantage=false"],
    "lr3e4": ["reward_table=null", "train.lr=3e-4"],
    "agentid": ["reward_table=null", "model.agent_id=true"],
    "nstep5": ["reward_table=null", "loss.estimator=nstep", "loss.nstep=5"],
    "clip10": ["reward_table=null", "train.max_grad_norm=10"],
    "team_id": [TEAM, "model.agent_id=true"],
    "team_id_decay": [TEAM, "model.agent_id=true", "loss.entropy_schedule=linear", "loss.entropy_final_scale=0.0"],
    "epymarl": ["recipe=epymarl"],
}
FIELDS = ["variant", "seed", "frames", "train_team_return_last10pct", "greedy_team_return", "sampled_team_return"]


def train(config: str, name: str, seeds: list[int], frames: int, out: Path) -> None:
    cmd = [sys.executable, "-m", "marl_ppo.cli", "train", config, f"train.seeds={seeds}", "train.num_threads=1",
           f"train.total_frames={frames}", f"log.root={out / name}", f"log.name={name}", "log.progress=false",
           "log.plot=false", *VARIANTS[name]]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def row(name: str, seed: int, run: Path, episodes: int) -> dict:
    from marl_ppo.config import from_yaml
    from marl_ppo.run.logger import read_scalars

    scenario = from_yaml((run / "config.yaml").read_text()).env.scenario  # LBF's "8x8-2p-2f-coop": 2 agents
    agents = int(re.search(r"(\d+)p", scenario).group(1))
    curve = [v for _, v in read_scalars(run).get("collect/agents/episode_reward", [])]
    tail = curve[-max(1, len(curve) // 10) :]
    cmd = [sys.executable, "-m", "marl_ppo.cli", "eval", str(run), "--episodes", str(episodes)]
    ev = json.loads(subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    return {
        "variant": name,
        "seed": seed,
        "frames": json.loads((run / "summary.json").read_text())["frames"],
        "train_team_return_last10pct": round(agents * statistics.mean(tail), 4),  # per-agent mean x agents
        "greedy_team_return": round(agents * ev["episode_reward_greedy"]["agents"], 4),
        "sampled_team_return": round(agents * ev["episode_reward_sampled"]["agents"], 4),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="lbf_8x8_2p_2f_coop")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {list(VARIANTS)}")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--frames", type=int, default=1_000_000, help="train.total_frames per seed")
    p.add_argument("--jobs", type=int, default=2, help="variants trained at once")
    p.add_argument("--episodes", type=int, default=100, help="evaluation episodes per seed and mode")
    p.add_argument("--out", type=Path, default=Path("/tmp/ablation"))
    p.add_argument("--csv", type=Path, help="append one row a seed here")
    p.add_argument("--evaluate-only", action="store_true", help="the runs under --out are trained already")
    p.add_argument("--quick", action="store_true", help="base and team, 2 000 frames, 4 episodes: does it run")
    args = p.parse_args()
    names = ["base", "team"] if args.quick else args.variants.split(",")
    frames, episodes = (2000, 4) if args.quick else (args.frames, args.episodes)
    seeds = [int(s) for s in args.seeds.split(",")]
    if not args.evaluate_only:
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda n: train(args.config, n, seeds, frames, args.out), names))
    rows = [row(n, s, args.out / n / f"{n}-seed{s}", episodes) for n in names for s in seeds
            if (args.out / n / f"{n}-seed{s}" / "summary.json").exists()]  # fmt: skip
    if args.csv:
        new = not args.csv.exists()
        with args.csv.open("a", newline="") as f:
            writer = csv.DictWriter(f, FIELDS)
            if new:
                writer.writeheader()
            writer.writerows(rows)
    print(f"| variant ({args.config}, {len(seeds)} seeds) | training, last 10 % | greedy | sampled |")
    print("|---|---:|---:|---:|")
    for n in names:
        mine = [r for r in rows if r["variant"] == n]
        if mine:
            cells = [statistics.mean(r[k] for r in mine) for k in FIELDS[3:]]
            print(f"| {n} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
