"""A parallel PettingZoo game's step, each group's entries written at once: torchrl's tensordict, value for value.

torchrl's ``PettingZooWrapper._step`` writes every live agent's observation through
``observation_spec[group, "observation"][index].encode(...)``, which builds a new spec for each
agent at each step, makes four ``torch.tensor`` calls per agent and deep-copies the observation
dict to take action masks out of it. On MAgent2's battle (12 soldiers, an engine in C) that is
about 30 times the game's own step. For a parallel game whose groups observe plain arrays and have
neither action masks nor infos, :class:`LeanParallelStep` stacks each group's live agents'
observations, rewards and flags and writes them in one assignment each (and the game's global
state, with ``return_state``, as torchrl encodes it); every other game takes
torchrl's step. A turn-based game converted by PettingZoo's ``aec_to_parallel_wrapper`` is
stepped through :class:`~marl_ppo.envs.aec_parallel.LeanAecToParallel`, which does not render the
observations that wrapper throws away. ``tests/envs/test_lean_step.py`` checks both give the same
tensordicts, agents that die included.
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data import Categorical, Composite, OneHot

from marl_ppo.envs.aec_parallel import lean_parallel_game

__all__ = ["LeanParallelStep", "reward_value"]


def reward_value(reward) -> float | int:
    """One agent's reward as a Python number: a float, a numpy scalar or a one-element array (as torchrl's
    ``torch.tensor(reward)`` reads it); anything larger fails with numpy's error. An integer stays an
    ``int``: the caller writes it as the reward spec's dtype."""
    return reward if isinstance(reward, float) else np.asarray(reward).item()


class LeanParallelStep:
    """Mixin before torchrl's ``PettingZooWrapper``: the lean step where the game allows it (``lean``: the switch)."""

    lean = True

    def _build_env(self, env, *args, **kwargs):
        # a turn-based game behind PettingZoo's parallel conversion: stepped without the observations
        # that conversion renders and throws away (marl_ppo/envs/aec_parallel.py)
        return super()._build_env(lean_parallel_game(env) if self.lean else env, *args, **kwargs)

    def lean_plan(self) -> list[tuple[str, list[str], torch.dtype]] | None:
        """``[(group, agents, observation dtype)]`` if this game takes the lean step, else ``None``; read once."""
        plan = self.__dict__.get("_lean_plan_cache", False)
        if plan is not False:
            return plan
        plan = None
        if self.lean and self.parallel and self.use_mask:
            spec = self.full_observation_spec
            plan = []
            for group, agents in self.group_map.items():
                leaf = spec[group, "observation"]
                plain = not isinstance(leaf, (Composite, Categorical, OneHot))
                if not plain or "info" in spec[group].keys() or self.has_action_mask[group]:
                    plan = None
                    break
                plan.append((group, list(agents), leaf.dtype))
        self.__dict__["_lean_plan_cache"] = plan
        return plan

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        plan = self.lean_plan()
        if plan is None:
            return super()._step(tensordict)
        observations, rewards, terminations, truncations, _ = self._step_parallel(tensordict)
        out = self.cached_step_output_zero.clone()
        self._update_agent_mask(out)
        acting = set(self.agents)
        for group, agents, dtype in plan:
            entries = out.get(group)
            live = [i for i, a in enumerate(agents) if a in observations]
            if live:
                names = [agents[i] for i in live]
                rows = slice(None) if len(live) == len(agents) else torch.tensor(live)
                obs = np.stack([np.asarray(observations[a]) for a in names])
                entries.get("observation")[rows] = torch.as_tensor(obs).to(dtype)
                reward = entries.get("reward")
                # as the spec's dtype: a step of Python-int rewards (Knights-Archers-Zombies) would build
                # an int64 tensor, which an index put into the rows of the agents still in the game refuses
                reward[rows] = torch.tensor([reward_value(rewards[a]) for a in names], dtype=reward.dtype).view(-1, 1)
                terminated = torch.tensor([bool(terminations[a]) for a in names]).view(-1, 1)
                truncated = torch.tensor([bool(truncations[a]) for a in names]).view(-1, 1)
                entries.get("terminated")[rows] = terminated
                entries.get("truncated")[rows] = truncated
                entries.get("done")[rows] = terminated | truncated
            for i, agent in enumerate(agents):
                if agent in observations:
                    continue
                if agent in acting:  # torchrl's own check
                    raise ValueError(
                        f"Dead agent {agent} not found in step observation but still available in {acting}"
                    )
                terminated, truncated = terminations.get(agent, True), truncations.get(agent, True)
                entries.get("done")[i] = terminated or truncated
                entries.get("terminated")[i] = terminated
                entries.get("truncated")[i] = truncated
        if self.return_state:  # torchrl's own encoding of the game's state
            out.set("state", self.observation_spec["state"].encode(self.state()))
        done, terminated, truncated = self._aggregate_done(out, use_any=self.done_on_any)
        out.set("done", done)
        out.set("terminated", terminated)
        out.set("truncated", truncated)
        return out
