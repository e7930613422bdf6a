"""A custom torchrl env with a composite action, trained with the public API directly (no Trainer).

The env is defined here: ``CargoCrewEnv``, a batched ``EnvBase`` with one group ``crew`` of two
agents. Each agent sees the vector to its goal and the type of the parcel it holds (one-hot); its
action is a composite ``{"move": Bounded box in [-1, 1]^2, "pick": Categorical(3)}``: move toward
the goal and pick the shelf that matches the parcel. Reward per agent and step:
``-distance to goal + 0.5 * (pick == parcel type)``. The env also writes a root ``team_bonus``
(1 when both agents picked right) that nobody trains on unless the reward table says so.

The pieces, in the order the trainer wires them:

1. ``read_group_specs(env)``: the group, its observation keys and its two action heads;
2. ``RewardTable(...).bind(groups, env)``: ``crew`` <- own reward + 0.5 x ``team_bonus`` (a root
   signal broadcast to the agents), validated against the env's specs and printed;
3. ``GroupRouter.from_specs``: the actor (tanh-normal ``move`` head + categorical ``pick`` head) and
   the centralised critic, one MAPPO loss per group (here one group), per-head entropy coefficients;
4. ``AggregatedStep``: one Adam over the router's parameters, one backward and step per minibatch;
5. the loop: ``env.rollout`` (sampling actions) -> bound table -> ``router.compute_advantages`` -> shuffled minibatches.

It prints the episode return (raw env reward) per iteration and first vs last.

Run::

    .venv/bin/python examples/custom_dict_env.py             # ~10 s on 2 CPU cores
    .venv/bin/python examples/custom_dict_env.py --tiny      # seconds (smoke test)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase, ExplorationType, set_exploration_type

from marl_ppo import AggregatedStep, GroupRouter, RewardTable, own, read_group_specs, signal


class CargoCrewEnv(EnvBase):
    """Group ``crew`` of ``n_agents``; action ``{move: box(2), pick: categorical(n_types)}``; root done."""

    batch_locked = True

    def __init__(self, num_envs: int = 32, n_agents: int = 2, n_types: int = 3, max_steps: int = 20,
                 seed: int = 0) -> None:
        super().__init__(batch_size=torch.Size([num_envs]))
        self.n_agents, self.n_types, self.max_steps = n_agents, n_types, max_steps
        # torchrl's multi-agent layout: the group map names the agents of each group
        self.group_map = {"crew": [f"crew_{i}" for i in range(n_agents)]}
        B, n = num_envs, n_agents
        self.observation_spec = Composite(
            crew=Composite(observation=Unbounded((B, n, 2 + n_types)), shape=(B, n)), shape=(B,)
        )
        self.action_spec = Composite(
            crew=Composite(
                action=Composite(
                    move=Bounded(-1.0, 1.0, shape=(B, n, 2)),
                    pick=Categorical(n_types, shape=(B, n)),
                    shape=(B, n),
                ),
                shape=(B, n),
            ),
            shape=(B,),
        )
        self.reward_spec = Composite(
            crew=Composite(reward=Unbounded((B, n, 1)), shape=(B, n)),
            team_bonus=Unbounded((B, 1)),
            shape=(B,),
        )
        self.done_spec = Composite(
            done=Categorical(2, (B, 1), dtype=torch.bool),
            terminated=Categorical(2, (B, 1), dtype=torch.bool),
            shape=(B,),
        )
        self._rng = torch.Generator().manual_seed(seed)
        self._pos = torch.zeros(B, n, 2)
        self._goal = torch.zeros(B, n, 2)
        self._parcel = torch.zeros(B, n, dtype=torch.long)
        self._t = torch.zeros(B, 1)

    def _observe(self) -> TensorDict:
        one_hot = torch.nn.functional.one_hot(self._parcel, self.n_types).float()
        obs = torch.cat([self._goal - self._pos, one_hot], dim=-1)
        return TensorDict({"observation": obs}, batch_size=(self.batch_size[0], self.n_agents))

    def _reset(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        B, n = self.batch_size[0], self.n_agents
        reset = torch.ones(B, dtype=torch.bool)
        if tensordict is not None and "_reset" in tensordict.keys():
            reset = tensordict.get("_reset").view(B)
        r = reset.view(B, 1, 1)
        self._pos = torch.where(r, torch.rand(B, n, 2, generator=self._rng) * 2 - 1, self._pos)
        self._goal = torch.where(r, torch.rand(B, n, 2, generator=self._rng) * 2 - 1, self._goal)
        self._parcel = torch.where(reset.view(B, 1), torch.randint(self.n_types, (B, n), generator=self._rng),
                                   self._parcel)
        self._t = torch.where(reset.view(B, 1), torch.zeros_like(self._t), self._t)
        done = torch.zeros(B, 1, dtype=torch.bool)
        return TensorDict({"crew": self._observe(), "done": done, "terminated": done.clone()}, self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(("crew", "action"))
        self._pos = (self._pos + 0.2 * action.get("move")).clamp(-1.5, 1.5)
        right = (action.get("pick") == self._parcel).float()  # [B, n]
        reward = -(self._goal - self._pos).norm(dim=-1) + 0.5 * right
        team_bonus = right.prod(dim=-1, keepdim=True)  # [B, 1]: every agent picked right
        self._parcel = torch.randint(self.n_types, self._parcel.shape, generator=self._rng)
        self._t = self._t + 1
        done = self._t >= self.max_steps
        crew = self._observe()
        crew.set("reward", reward.unsqueeze(-1))  # keep the trailing 1: [B, n_agents, 1]
        return TensorDict(
            {"crew": crew, "team_bonus": team_bonus, "done": done, "terminated": done.clone()},
            self.batch_size,
        )

    def _set_seed(self, seed: int | None) -> None:
        self._rng.manual_seed(0 if seed is None else seed)


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a few seconds: smoke-test sizes")
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=20, help="episode length (one episode per iteration)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatch", type=int, default=320, help="env steps per minibatch")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--out", default="runs", help="folder for returns.json and the final weights")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.tiny:
        args.iterations, args.num_envs, args.max_steps, args.minibatch = 4, 8, 10, 40
    torch.manual_seed(args.seed)

    env = CargoCrewEnv(num_envs=args.num_envs, max_steps=args.max_steps, seed=args.seed)
    groups = read_group_specs(env)
    for g, spec in groups.items():
        heads = dict(spec.agent_action_spec.items())
        print(f"group {g!r}: agents {list(spec.agents)}, observation {spec.observation_keys} "
              f"{list(spec.observation_shape)}, action heads "
              + ", ".join(f"{k}: {type(v).__name__}{list(v.shape)}" for k, v in heads.items()))

    table = RewardTable({"crew": [own(1.0), signal("team_bonus", weight=0.5)]}).bind(groups, env)
    print(table)

    router = GroupRouter.from_specs(groups, algorithm="mappo", hidden=(64, 64),
                                   head_entropy_coeff={"move": 0.0, "pick": 0.01})
    step = AggregatedStep(router, lr=args.lr, max_grad_norm=1.0)

    returns = []
    for it in range(args.iterations):
        # A rollout starts with a reset and lasts one episode: [num_envs, max_steps]. The actor's
        # default interaction type is deterministic (the mode): sample explicitly, as collectors do.
        with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
            batch = table(env.rollout(args.max_steps, router.policy, break_when_any_done=False))
        router.compute_advantages(batch)  # per group, on ("crew", "advantage"), [B, T, n, 1]
        flat = batch.reshape(-1)
        size = min(args.minibatch, flat.shape[0])
        for _ in range(args.epochs):
            perm = torch.randperm(flat.shape[0])
            for idx in perm.split(size):
                if len(idx) < size:  # drop the ragged last minibatch
                    continue
                losses = router(flat[idx])  # TensorDict {group: {loss_*, diagnostics}}
                stats = step(losses)        # one backward, one clip, one step
        ret = batch.get(("next", "crew", "reward")).sum(dim=1).mean().item()  # sum over time, mean over envs/agents
        returns.append(ret)
        diag = losses.get("crew")
        print(f"iter {it + 1:3d}  return {ret:8.3f}  both picked right {batch['next', 'team_bonus'].mean().item():.2f}"
              f"  entropy move {diag['move', 'entropy'].item():.3f} pick {diag['pick', 'entropy'].item():.3f}  "
              f"loss {stats['loss'].item():.3f}")

    k = max(1, len(returns) // 5)
    first, last = sum(returns[:k]) / k, sum(returns[-k:]) / k
    print(f"\nreturn: first {k} iterations {first:.3f} -> last {k} iterations {last:.3f} "
          f"({'rising' if last > first else 'not rising'})")
    out = Path(args.out) / "custom_dict_env"
    out.mkdir(parents=True, exist_ok=True)
    (out / "returns.json").write_text(json.dumps({"returns": returns, "first": first, "last": last}))
    torch.save(router.state_dict(), out / "router.pt")
    print(f"wrote {out / 'returns.json'} and {out / 'router.pt'}")
    return returns


if __name__ == "__main__":
    main()
