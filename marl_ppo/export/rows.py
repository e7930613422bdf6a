"""Real observations for the run-back check: a few steps of the run's own env, played by its trained policy.

Random inputs certify that a file computes what its torch graph computes, not that the graph is the
policy the run trained: a policy that reads other agents (a radius GNN) run one agent at a time
agrees with itself on random rows where no two agents are near, and differs from the trained policy
wherever they are. :func:`play_env` resets the run's env and plays ``steps`` deterministic steps of
the trained policy (every group, as ``marl-ppo eval`` plays them), keeping each step's inputs and
the policy's outputs; :func:`rows_of` gives one graph's inputs and the trained policy's outputs on
them, in the graph's layout (``agent``: each agent of each env copy one row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.envs import EnvBase, ExplorationType, set_exploration_type

from marl_ppo.export.graph import PolicyGraph

__all__ = ["EnvRows", "play_env", "rows_of", "ENV_STEPS"]

ENV_STEPS = 8  # steps played after the reset: enough for agents to meet, a fraction of a second on the CPU


@dataclass(frozen=True)
class EnvRows:
    """A graph's inputs on real observations and the trained policy's outputs there (numpy, in port
    order); ``steps`` env steps gave ``len(inputs[0])`` rows."""

    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    steps: int


def play_env(env: EnvBase, policy, steps: int = ENV_STEPS) -> list[TensorDictBase]:
    """Each of ``steps`` steps' tensordict (its inputs and the policy's outputs) from a reset of ``env``,
    the policy's actions deterministic; an episode that ends restarts, as in an evaluation."""
    out = []
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        td = env.reset()
        for _ in range(steps):
            td = policy(td)
            out.append(td.clone())
            td = env.step_and_maybe_reset(td)[1]
    return out


def rows_of(graph: PolicyGraph, played: Sequence[TensorDictBase], n_agents: int) -> EnvRows:
    """``graph``'s inputs over the ``played`` steps and the trained policy's outputs on them, each in
    the graph's layout. The outputs are what the policy played in its group layout: a graph that runs
    one agent at a time must give them agent by agent."""
    per_agent = graph.layout == "agent"

    def rows(key, is_init: bool = False) -> np.ndarray:
        steps = []
        for td in played:
            value = td.get(key)
            value = value.reshape(-1, *value.shape[td.batch_dims :])  # [copies, ...]
            if per_agent:  # [copies * n_agents, ...]; is_init, one per copy, repeated for its agents
                value = value.repeat_interleave(n_agents, 0) if is_init else value.flatten(0, 1)
            steps.append(value)
        return torch.cat(steps).numpy()

    inputs = [rows(p.key, p.key == "is_init") for p in graph.inputs]
    outputs = [rows(p.key) for p in graph.outputs]
    return EnvRows(inputs, outputs, len(played))
