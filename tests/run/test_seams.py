"""A variant is one file plus one table line: a kind defined here, outside the package, trains through
``marl-ppo train`` without any change to ``marl_ppo/``.

* an env kind (:mod:`marl_ppo.envs.kinds`): the depot game of ``tests/envs/custom_envs.py`` made by a
  function of this file, registered, trained as two seeds in one process (its copies batched in one
  env), evaluated by the run's own evaluation, and refused once it is gone;
* an algorithm (:mod:`marl_ppo.algorithms`) with an update mode of its own
  (:mod:`marl_ppo.core.update_modes`), run by the trainer;
* a model kind (:mod:`marl_ppo.models.registry`): a trunk of this file with an option of its own, fed
  the group's observation spec (two entries per agent here) and reporting its width, as actor and
  as centralised critic, for one seed and two.
"""

from __future__ import annotations

import json

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.data import Composite, Unbounded

from marl_ppo.algorithms import ALGORITHMS, Algorithm, register_algorithm
from marl_ppo.cli import main
from marl_ppo.core.update import ppo_update
from marl_ppo.core.update_modes import UPDATE_MODES, UpdateMode
from marl_ppo.envs.kinds import ENV_KINDS, EnvKind, register_env_kind
from marl_ppo.models.registry import MODEL_KINDS, ModelKind, Trunk, register_model_kind
from tests.envs.custom_envs import DepotEnv

TINY = [
    "env.num_envs=4",
    "env.max_steps=10",
    "env.kwargs={}",
    "train.frames_per_batch=40",
    "train.total_frames=80",
    "train.num_epochs=1",
    "train.minibatch_size=20",
    "model.hidden=[16]",
    "log.eval_episodes=3",
    "log.progress=false",
    "log.plot=false",
]


def make_depot(cfg, *, seed: int, num_envs: int, device=None) -> DepotEnv:
    """An env kind of this file: the depot game, sized by ``env.num_envs`` and ``env.max_steps``."""
    return DepotEnv(num_envs=num_envs, max_steps=cfg.max_steps, seed=seed, device=device or "cpu")


@pytest.fixture
def depot_kind(isolated):
    isolated(ENV_KINDS)
    return register_env_kind(EnvKind("depot", make_depot, vectorised=True, seeds_in_one_env=True))


def test_an_env_kind_is_one_table_line_and_trains_through_the_command_line(depot_kind, tmp_path, capsys):
    args = ["train", "env.kind=depot", *TINY, "train.seeds=[0,1]", f"log.root={tmp_path}", "log.name=depot"]
    assert main(args) == 0
    out = capsys.readouterr().out
    summaries = json.loads(out[out.index("\n[") + 1 :])
    assert [s["frames"] for s in summaries] == [80, 80]
    assert all("2 seeds in one process" in s["collector"] for s in summaries)
    for s in summaries:  # both groups of the game evaluated, on exactly the episodes asked for
        assert s["eval/episodes"] == 3 and {"eval/crew/episode_reward", "eval/scout/episode_reward"} <= set(s)
    # the kind's name is what the run records
    assert "kind: depot" in (tmp_path / "depot-seed0" / "config.yaml").read_text()


def test_an_unregistered_env_kind_is_refused_with_the_kinds_there_are(capsys):
    assert "depot" not in ENV_KINDS
    assert main(["train", "env.kind=depot", *TINY, "--print-config"]) == 1
    err = capsys.readouterr().err
    assert "env.kind must be one of" in err and "'pettingzoo'" in err and "'depot'" in err


UPDATES = []


def halved_epochs(model, step, batch, *, num_epochs, **kwargs):
    """An update mode of this file: the joint step over half the configured epochs, recorded."""
    UPDATES.append((model.seeds, num_epochs // 2))
    return ppo_update(model, step, batch, num_epochs=num_epochs // 2, **kwargs)


@pytest.fixture
def halved_algorithm(isolated):
    isolated(ALGORITHMS, UPDATE_MODES)
    UPDATE_MODES.register(UpdateMode("halved", halved_epochs))
    entry = register_algorithm(
        Algorithm("ippo_half", "torchrl.objectives.multiagent:IPPOLoss", "decentralised", update="halved")
    )
    UPDATES.clear()
    return entry


@pytest.mark.parametrize("seeds", ["[0]", "[0,1]"])
def test_an_algorithm_is_one_table_line_and_its_update_mode_runs_in_the_trainer(halved_algorithm, tmp_path, seeds):
    overrides = [o for o in TINY if o != "env.kwargs={}"] + ["train.num_epochs=4", "loss.algorithm=ippo_half"]
    assert main(["train", *overrides, f"train.seeds={seeds}", f"log.root={tmp_path}", "log.name=half"]) == 0
    n = seeds.count(",") + 1
    assert UPDATES == [(n, 2), (n, 2)]  # the mode's own update, each iteration, on every seed at once
    assert "algorithm: ippo_half" in (tmp_path / "half-seed0" / "config.yaml").read_text()


class SplitDepot(DepotEnv):
    """The depot game with each crew agent's observation in two entries: ``offset`` [2] and ``parcel`` [3]."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        B, spec = self.batch_size[0], self.observation_spec.clone()
        spec["crew"] = Composite(offset=Unbounded((B, 2, 2)), parcel=Unbounded((B, 2, self.n_types)), shape=(B, 2))
        self.observation_spec = spec

    def _observe(self):
        out = super()._observe()
        whole = out["crew"].pop("observation")
        out["crew"].update({"offset": whole[..., :2], "parcel": whole[..., 2:]})
        return out


class NormedEncoder(nn.Module):
    """Linear, LayerNorm, tanh on each agent's entries (a centralised critic: on the whole group's)."""

    def __init__(self, n_in: int, width: int, n_agents: int, centralized: bool) -> None:
        super().__init__()
        self.n_agents, self.centralized = n_agents, centralized
        self.net = nn.Sequential(
            nn.Linear(n_in * (n_agents if centralized else 1), width), nn.LayerNorm(width), nn.Tanh()
        )

    def forward(self, *entries: torch.Tensor) -> torch.Tensor:
        x = torch.cat(entries, dim=-1)
        if not self.centralized:
            return self.net(x)
        y = self.net(x.flatten(-2)).unsqueeze(-2)
        return y.expand(*y.shape[:-2], self.n_agents, y.shape[-1])


SEEN = []


def normed_trunk(group, inputs, *, role, centralized, share_params, hidden, activation, device, width):
    """A model kind of this file: reads every observation entry of the group's spec, reports ``width``."""
    keys = list(group.observation_keys)
    SEEN.append((group.name, role, centralized, {k[-1]: tuple(inputs[k].shape) for k in keys}))
    n_in = sum(inputs[k].shape[-1] for k in keys)
    out_key = (group.name, f"{role}_normed")
    module = TensorDictModule(NormedEncoder(n_in, width, group.n_agents, centralized), in_keys=keys, out_keys=[out_key])
    return Trunk(module.to(device), out_key, width)


@pytest.fixture
def normed_kind(isolated):
    isolated(MODEL_KINDS, ENV_KINDS)
    kinds = [
        register_model_kind(ModelKind("normed", normed_trunk, options={"width": 32})),
        register_env_kind(
            EnvKind(
                "split_depot",
                lambda cfg, *, seed, num_envs, device=None: SplitDepot(
                    num_envs=num_envs, max_steps=cfg.max_steps, seed=seed, device=device or "cpu"
                ),
                vectorised=True,
            )
        ),
    ]
    SEEN.clear()
    return kinds


@pytest.mark.parametrize("seeds", ["[0]", "[0,1]"])
def test_a_model_kind_is_one_table_line_and_reads_the_groups_observation_spec(normed_kind, tmp_path, seeds):
    args = [*TINY, "env.kind=split_depot", "model.kind=normed", "model.options.normed.width=12", f"train.seeds={seeds}"]
    assert main(["train", *args, f"log.root={tmp_path}", "log.name=normed"]) == 0
    # the kind saw each group's observation entries with their per-step shapes, as actor and as MAPPO's critic
    assert ("crew", "actor", False, {"offset": (2, 2), "parcel": (2, 3)}) in SEEN
    assert ("crew", "critic", True, {"offset": (2, 2), "parcel": (2, 3)}) in SEEN
    assert ("scout", "actor", False, {"observation": (1, 6)}) in SEEN
    checkpoint = torch.load(tmp_path / "normed-seed0" / "checkpoints" / "last.pt", weights_only=True)
    norms = {k: v.shape for k, v in _tensors(checkpoint) if k.endswith("net.1.weight")}
    assert norms and all(shape == (12,) for shape in norms.values()), norms  # the option reached the trunk
    assert "normed:\n      width: 12" in (tmp_path / "normed-seed0" / "config.yaml").read_text()


def test_a_model_kinds_unknown_option_is_refused_with_the_options_it_takes(normed_kind, capsys):
    assert main(["train", *TINY, "model.kind=normed", "model.options.normed.depth=2", "--print-config"]) == 1
    assert (
        "model.options.normed: unknown option 'depth'; model kind 'normed' takes ['width']" in capsys.readouterr().err
    )


def _tensors(state, prefix=""):
    for key, value in state.items():
        if isinstance(value, dict):
            yield from _tensors(value, f"{prefix}{key}.")
        elif isinstance(value, torch.Tensor):
            yield f"{prefix}{key}", value
