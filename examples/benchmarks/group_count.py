"""What a group costs: the PPO update for 8 groups of 1 agent against 1 group of 8 agents.

Both layouts have the same agents (observation 18, 2-d box action, MLP 256x2 tanh), the same
synthetic batch size and the same minibatches and epochs. Groups are plain
:class:`~marl_ppo.groups.GroupSpec` objects built by hand; each batch carries the routed
``("next", group, "train_reward" | "train_done" | "train_terminated")`` entries a bound reward
table would write, actions and log-probs from the router's own policy. Per layout and repeat:
``router.compute_advantages`` ("GAE") and ``ppo_update`` ("update"), alternating the layouts.

The default ``--algorithm ippo`` gives both layouts the same network work per sample (every agent's
value from its own observation), so the ratio 8x1 / 1x8 is what one loss per group costs:
8 actor and 8 critic calls per minibatch, and 8 times the parameters in the one Adam step and
gradient clip (groups share no weights). The 8 groups have identical specs, so the router bundles
them into one torchrl loss call (``marl_ppo.core.bundles``); the third layout, ``8x1-calls``, turns that
off (``bundle_groups=False``) and pays each group's own loss call. ``--algorithm mappo`` instead
gives the 1x8 group one centralised critic over all 8 observations.

Run (a few minutes; use a quiet machine):

    .venv/bin/python examples/benchmarks/group_count.py
    .venv/bin/python examples/benchmarks/group_count.py --quick       # smoke check, seconds

On a shared machine pass ``--threads 1`` (see throughput.py).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
from tensordict import TensorDict
from torchrl.data import Bounded

from marl_ppo.core.aggregate import AggregatedStep
from marl_ppo.core.router import GroupRouter
from marl_ppo.core.update import ppo_update
from marl_ppo.groups import GroupSpec

OBS_DIM, ACT_DIM, N_AGENTS = 18, 2, 8
FULL = dict(repeats=3, envs=60, steps=100, epochs=5, minibatch=400)
QUICK = dict(repeats=2, envs=6, steps=100, epochs=2, minibatch=200)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int)
    p.add_argument("--envs", type=int, help="batch envs (batch = envs x steps samples)")
    p.add_argument("--steps", type=int, help="time steps per env in the batch")
    p.add_argument("--epochs", type=int)
    p.add_argument("--minibatch", type=int)
    p.add_argument("--algorithm", choices=("ippo", "mappo"), default="ippo")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke check")
    args = p.parse_args()
    for k, v in (QUICK if args.quick else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def make_spec(name: str, n: int) -> GroupSpec:
    return GroupSpec(
        name=name,
        agents=tuple(f"{name}_{i}" for i in range(n)),
        observation_keys=((name, "observation"),),
        action_spec=Bounded(-1.0, 1.0, shape=(n, ACT_DIM)),
        env_batch_ndim=0,
        raw_reward_key=(name, "reward"),
        observation_shape=(n, OBS_DIM),
    )


def layouts() -> dict[str, tuple[dict[str, GroupSpec], bool]]:
    """``{layout: (groups, bundle_groups)}``."""
    eight = {f"g{i}": make_spec(f"g{i}", 1) for i in range(N_AGENTS)}
    return {
        "8x1": (eight, True),
        "8x1-calls": (eight, False),
        "1x8": ({"agents": make_spec("agents", N_AGENTS)}, True),
    }


def make_batch(groups: dict[str, GroupSpec], router: GroupRouter, envs: int, steps: int) -> TensorDict:
    """A [envs, steps] rollout: observations, routed training reward/done (episodes of 50 steps),
    and the policy's actions and log-probs."""
    root, nxt = {}, {}
    done = torch.zeros(envs, steps, dtype=torch.bool)
    done[:, 49::50] = True
    done[:, -1] = True
    for g, s in groups.items():
        n = s.n_agents
        seq = torch.randn(envs, steps + 1, n, OBS_DIM)
        d = done[:, :, None, None].expand(envs, steps, n, 1).clone()
        root[g] = TensorDict({"observation": seq[:, :-1]}, [envs, steps, n])
        nxt[g] = TensorDict(
            {
                "observation": seq[:, 1:],
                "train_reward": torch.randn(envs, steps, n, 1),
                "train_done": d,
                "train_terminated": d.clone(),
            },
            [envs, steps, n],
        )
    td = TensorDict({**root, "next": TensorDict(nxt, [envs, steps])}, [envs, steps])
    with torch.no_grad():
        router.policy(td)
    return td


def build(groups: dict[str, GroupSpec], algorithm: str, bundle_groups: bool = True):
    router = GroupRouter.from_specs(
        groups,
        algorithm=algorithm,
        hidden=(256, 256),
        activation="tanh",
        clip_epsilon=0.2,
        entropy_coeff=0.0,
        normalize_advantage=False,
        gamma=0.99,
        lmbda=0.9,
        bundle_groups=bundle_groups,
    )
    return router, AggregatedStep(router, lr=5e-5, max_grad_norm=5.0)


def main() -> None:
    args = parse_args()
    n = args.envs * args.steps
    n_steps = args.epochs * max(n // args.minibatch, 1)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.algorithm}, {N_AGENTS} agents "
        f"(obs {OBS_DIM}, act {ACT_DIM}), batch {args.envs}x{args.steps} = {n}, {args.epochs} epochs, "
        f"minibatch {args.minibatch} ({n_steps} gradient steps), {args.repeats} repeats"
    )
    runs = {}
    for name, (groups, bundle_groups) in layouts().items():
        torch.manual_seed(0)
        router, step = build(groups, args.algorithm, bundle_groups)
        batch = make_batch(groups, router, args.envs, args.steps)
        router.compute_advantages(batch)
        warm = batch[:, : max(args.minibatch // args.envs, 1)]  # one untimed minibatch
        ppo_update(router, step, warm, num_epochs=1, minibatch_size=args.minibatch)
        runs[name] = (router, step, batch, sum(p.numel() for p in step.params))

    times: dict[str, dict[str, list[float]]] = {name: {"gae": [], "update": []} for name in runs}
    for rep in range(args.repeats):
        line = []
        for name, (router, step, batch, _) in runs.items():
            t0 = time.perf_counter()
            router.compute_advantages(batch)
            t1 = time.perf_counter()
            ppo_update(router, step, batch, num_epochs=args.epochs, minibatch_size=args.minibatch)
            t2 = time.perf_counter()
            times[name]["gae"].append(t1 - t0)
            times[name]["update"].append(t2 - t1)
            line.append(f"{name}: GAE {t1 - t0:.3f}s update {t2 - t1:.2f}s")
        print(f"  repeat {rep + 1}: " + "   ".join(line))

    med = {name: {k: statistics.median(v) for k, v in t.items()} for name, t in times.items()}
    print(f"\nmedian of {args.repeats}")
    print(f"  {'layout':<10}{'groups':>7}{'calls':>6}{'params':>10}{'GAE s':>9}{'update s':>10}{'ms/step':>9}")
    for name, (router, _, _, n_params) in runs.items():
        m = med[name]
        calls = len(router.groups) - sum(len(b) - 1 for b in router.bundles)
        print(
            f"  {name:<10}{len(router.groups):>7}{calls:>6}{n_params:>10}{m['gae']:>9.3f}{m['update']:>10.2f}"
            f"{1e3 * m['update'] / n_steps:>9.2f}"
        )
    print(f"  update ratio 8x1 / 1x8         {med['8x1']['update'] / med['1x8']['update']:.2f}x   (target <= 1.5x)")
    print(f"  update ratio 8x1-calls / 1x8   {med['8x1-calls']['update'] / med['1x8']['update']:.2f}x")
    print(f"  GAE ratio 8x1 / 1x8            {med['8x1']['gae'] / med['1x8']['gae']:.2f}x")
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
