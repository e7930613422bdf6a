"""Any PettingZoo env by import path: Knights-Archers-Zombies, whose agents die mid-episode.

``env.scenario`` names the module (``pettingzoo.butterfly.knights_archers_zombies_v11``: the
PettingZoo registry id ``butterfly/knights_archers_zombies-v11`` works too), ``env.kwargs`` go to
its ``parallel_env`` and ``env.max_steps`` becomes its ``max_cycles``. Agents are grouped by name
prefix: ``archer`` (2 agents) and ``knight`` (2 agents), each group with its own MAPPO loss. Its
vector observation (27 entities x 5 features, here fewer with smaller ``max_zombies`` and
``max_arrows``) is flattened to one float vector per agent.

An agent a zombie reaches (or, with ``line_death``, that touches the top or bottom wall) leaves the
episode; the others play on. From then on its ``(group, "mask")`` is False: those steps get no
advantage and no weight in the losses. The script prints how many agent-steps that was in a
rollout of the trained policy.

Run::

    .venv/bin/python examples/pettingzoo_knights_archers_zombies.py          # ~1 min on 2 CPU cores
    .venv/bin/python examples/pettingzoo_knights_archers_zombies.py --tiny   # seconds (smoke test)
    # the same run from the command line:
    # marl-ppo train env.kind=pettingzoo env.scenario=pettingzoo.butterfly.knights_archers_zombies_v11 \\
    #     env.continuous_actions=false "env.kwargs={line_death: true}" env.max_steps=100
"""

from __future__ import annotations

import argparse

import torch
from torchrl.envs import ExplorationType, set_exploration_type

from marl_ppo.config import load_config
from marl_ppo.envs import make_env
from marl_ppo.run.trainer import Trainer


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a few seconds: smoke-test sizes")
    parser.add_argument("--frames", type=int, default=20_000, help="total env steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--out", default="runs", help="parent folder of the run directory")
    args = parser.parse_args(argv)
    if args.tiny:
        sizes = [
            "env.num_envs=2",
            "env.max_steps=40",
            "train.frames_per_batch=80",
            "train.total_frames=160",
            "train.num_epochs=1",
            "train.minibatch_size=40",
            "model.hidden=[16]",
        ]
    else:
        sizes = [
            "env.num_envs=4",
            "env.max_steps=100",
            "train.frames_per_batch=2000",
            f"train.total_frames={args.frames}",
            "train.num_epochs=4",
            "train.minibatch_size=250",
        ]
    cfg = load_config(
        overrides=[
            "env.kind=pettingzoo",
            "env.scenario=pettingzoo.butterfly.knights_archers_zombies_v11",
            "env.kwargs={line_death: true, max_zombies: 4, max_arrows: 4}",
            "env.continuous_actions=false",
            *sizes,
            f"train.seed={args.seed}",
            f"train.num_threads={args.threads}",
            "loss.entropy_coeff=0.01",
            "log.eval_every=0",
            "log.eval_episodes=4",
            "log.progress=false",
            f"log.root={args.out}",
        ]
    )
    print(f"env.scenario: {cfg.env.scenario}, kwargs {dict(cfg.env.kwargs)}")
    trainer = Trainer(cfg)
    print("groups: " + ", ".join(f"{g} {list(s.agents)}" for g, s in trainer.parts.groups.items()))
    print(trainer.parts.reward_table)
    summary = trainer.fit()
    for g in trainer.parts.groups:
        print(
            f"{g}: deterministic evaluation over {summary['eval/episodes']} episodes "
            f"{summary[f'eval/{g}/episode_reward']:.3f}"
        )

    env = make_env(cfg.env, seed=cfg.train.seed + 1)
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        td = env.rollout(cfg.env.max_steps, trainer.parts.router.policy, break_when_any_done=False)
    goes_on = ~td["next", "done"]  # [copies, T, 1]
    gone = sum(int((~td[g, "mask"] & goes_on).sum()) for g in trainer.parts.groups)
    total = sum(td[g, "mask"].numel() for g in trainer.parts.groups)
    print(
        f"agent-steps after leaving (masked, while the episode went on): {gone} of {total}, {100 * gone / total:.1f}%"
    )
    print(f"run directory: {trainer.run_dir}")
    return summary


if __name__ == "__main__":
    main()
