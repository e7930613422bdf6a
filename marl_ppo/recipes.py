"""The field's recipes by name (``recipe=epymarl``): a named overlay of config values, with its source.

A :class:`Recipe` row holds the values a published implementation trains with, for every env kind and per
family (``env.kind``: LBF's and RWARE's differ in EPyMARL's table), each row citing where they come from.
:func:`~marl_ppo.config.load_config` lays the recipe just below the layer that names it: named on the command
line, it goes over the config file (its other ``key=value`` overrides still win); named in a file, the
file's own values win over it (so a run's resolved ``config.yaml``, which names its recipe, reads back to
the same config). ``marl-ppo train CONFIG --print-config`` says which values a recipe set and which a later
layer changed; a suite sweeps recipes as any key (``sweep: {recipe: [epymarl, mappo]}``). ``docs/recipes.md``
lists every value with its source.

>>> RECIPES.lookup("epymarl").values_for("lbf")["loss.estimator"]
'nstep'
>>> RECIPES.lookup("epymarl").values_for("lbf")["train.lr"], RECIPES.lookup("epymarl").values_for("vmas")["train.lr"]
(0.0003, 0.0005)
>>> RECIPES.lookup("mapo")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: unknown recipe 'mapo' (did you mean 'mappo' or 'marl_ppo'?); registered: [...]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marl_ppo.table import Table

__all__ = ["Recipe", "RECIPES", "recipe"]

# one group's training reward: the sum of every agent's reward (EPyMARL's common reward, "sum" scalarisation)
TEAM_SUM = {"agents": {"reward": [{"team": ["agents"], "reduce": "sum"}], "done": "root"}}
WHOLE_BATCH = "${train.frames_per_batch}"  # one minibatch: the whole batch (resolved when the config is)


@dataclass(frozen=True)
class Recipe:
    """A named overlay: ``values`` (dotted config keys) for every env kind, ``families`` more of them by
    ``env.kind``, ``source`` where they come from (paper table, file and commit), ``leaves_out`` what the
    published recipe has that this overlay cannot set, in words."""

    name: str
    source: str
    values: Mapping[str, Any] = field(default_factory=dict)
    families: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    leaves_out: str = ""

    def values_for(self, kind: str) -> dict[str, Any]:
        """The recipe's values for ``env.kind=kind``: the common ones, then its family's."""
        return {**self.values, **self.families.get(kind, {})}


RECIPES: Table[Recipe] = Table(
    "recipe",
    [
        Recipe(
            "epymarl",
            "Papoudakis, Christianos, Schäfer and Albrecht, 'Benchmarking Multi-Agent Deep Reinforcement Learning "
            "Algorithms in Cooperative Tasks' (NeurIPS 2021 Datasets and Benchmarks), Table 24: MAPPO with "
            "parameter sharing, tuned on LBF 15x15-3p-5f and RWARE Tiny 4p; EPyMARL's src/config/algs/mappo.yaml "
            "where the table is silent (10 parallel envs, 4 epochs over the whole batch, gradient clip 10)",
            values={
                "model.kind": "mlp",
                "model.hidden": [128, 128],
                "model.activation": "relu",
                "model.share_params": True,
                "model.agent_id": True,
                "loss.algorithm": "mappo",
                "loss.clip_epsilon": 0.2,
                "loss.entropy_coeff": 0.001,
                "loss.gamma": 0.99,
                "loss.estimator": "nstep",
                "loss.nstep": 5,
                "loss.normalize_advantage": False,
                "loss.value_norm": "none",
                "train.lr": 5.0e-4,
                "train.num_epochs": 4,
                "train.minibatch_size": WHOLE_BATCH,
                "train.max_grad_norm": 10.0,
                "env.num_envs": 10,
                "env.time_limit": "terminate",
            },
            families={
                "lbf": {
                    "train.lr": 3.0e-4,
                    "loss.nstep": 5,
                    "env.max_steps": 50,
                    "train.frames_per_batch": 500,
                    "reward_table": TEAM_SUM,
                },
                "rware": {
                    "train.lr": 5.0e-4,
                    "loss.nstep": 10,
                    "env.max_steps": 500,
                    "train.frames_per_batch": 5000,
                    "reward_table": TEAM_SUM,
                },
            },
            leaves_out="the critic's targets from a soft-updated target critic (tau 0.01) and separate actor and "
            "critic Adams, each clipped at 10 (here: the online critic, one Adam clipped at 10 over both); "
            "reward standardisation; batches of 10 whole episodes (here: 10 envs x max_steps frames, which "
            "are whole episodes when none ends early)",
        ),
        Recipe(
            "mappo",
            "Yu, Velu, Vinitsky, Gao, Wang, Bayen and Wu, 'The Surprising Effectiveness of PPO in Cooperative "
            "Multi-Agent Games' (NeurIPS 2022 Datasets and Benchmarks), their published defaults: "
            "marlbenchmark/on-policy, onpolicy/config.py (lr and critic_lr 5e-4, ppo_epoch 15, clip 0.2, "
            "num_mini_batch 1, entropy 0.01, gamma 0.99, gae_lambda 0.95, max_grad_norm 10, use_valuenorm, "
            "use_huber_loss, hidden_size 64 with layer_N 1, use_ReLU, share_policy)",
            values={
                "model.kind": "mlp",
                "model.hidden": [64, 64],
                "model.activation": "relu",
                "model.share_params": True,
                "loss.algorithm": "mappo",
                "loss.clip_epsilon": 0.2,
                "loss.entropy_coeff": 0.01,
                "loss.gamma": 0.99,
                "loss.lmbda": 0.95,
                "loss.estimator": "gae",
                "loss.normalize_advantage": True,
                "loss.value_norm": "running",
                "loss.loss_critic_type": "smooth_l1",
                "train.lr": 5.0e-4,
                "train.num_epochs": 15,
                "train.minibatch_size": WHOLE_BATCH,
                "train.max_grad_norm": 10.0,
            },
            leaves_out="the Huber loss's delta of 10 (torch's smooth L1 has 1), the running value normaliser's "
            "decay 0.99999 (here: exact statistics), feature normalisation of the inputs, orthogonal "
            "initialisation, and the agent-specific global state of their SMAC runs",
        ),
        Recipe(
            "benchmarl",
            "BenchMARL 1.5.2 (Bettini, Prorok and Moens, JMLR 2024): benchmarl/conf/experiment/base_experiment.yaml "
            "and benchmarl/conf/algorithm/mappo.yaml, as examples/benchmarks/vs_benchmarl.py reads them from "
            "BenchMARL's own venv (shared/tools/benchmarl_baseline.sh)",
            values={
                "model.kind": "mlp",
                "model.hidden": [256, 256],
                "model.activation": "tanh",
                "model.share_params": True,
                "loss.algorithm": "mappo",
                "loss.clip_epsilon": 0.2,
                "loss.entropy_coeff": 0.0,
                "loss.critic_coeff": 1.0,
                "loss.loss_critic_type": "l2",
                "loss.gamma": 0.99,
                "loss.lmbda": 0.9,
                "loss.estimator": "gae",
                "loss.normalize_advantage": False,
                "loss.value_norm": "none",
                "train.lr": 5.0e-5,
                "train.frames_per_batch": 6000,
                "train.num_epochs": 45,
                "train.minibatch_size": 400,
                "train.max_grad_norm": 5.0,
                "env.num_envs": 10,
                "env.time_limit": "terminate",
            },
            leaves_out="one Adam per group and loss term, stepped one after another (here: one step over all), "
            "and the tanh-normal's biased softplus scale of continuous actions",
        ),
        Recipe(
            "marl_ppo",
            "this project's ablation on LBF 8x8-2p-2f-coop (docs/recipes.md, 'The ablation', 3 seeds x 1 000 000 "
            "frames): of the EPyMARL paper's ingredients, the team's summed reward alone moved both the plateau "
            "(0.85 -> 0.97) and the greedy return (0.10 -> 0.85); the rest is the config's own. Measured on 8x8: on "
            "10x10-3p-3f the team's reward learned more slowly at 1 000 000 frames (0.55 against 0.68)",
            families={"lbf": {"reward_table": TEAM_SUM}},
        ),
    ],
)


def recipe(name: str) -> Recipe:
    """The recipe ``name`` (a ValueError naming the closest and every registered one)."""
    return RECIPES.lookup(name)
