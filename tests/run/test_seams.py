"""A variant is one file plus one table line: a kind defined here, outside the package, trains through
``marl-ppo train`` without any change to ``marl_ppo/``.

* an env kind (:mod:`marl_ppo.envs.kinds`): the depot game of ``tests/envs/custom_envs.py`` made by a
  function of this file, registered, trained as two seeds in one process (its copies batched in one
  env), evaluated by the run's own evaluation, and refused once it is gone.
"""

from __future__ import annotations

import json

import pytest

from marl_ppo.algorithms import ALGORITHMS, Algorithm, register_algorithm
from marl_ppo.cli import main
from marl_ppo.core.update import ppo_update
from marl_ppo.envs.kinds import ENV_KINDS, EnvKind, register_env_kind
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
def depot_kind():
    kind = register_env_kind(EnvKind("depot", make_depot, vectorised=True, seeds_in_one_env=True))
    yield kind
    ENV_KINDS.pop("depot")


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
def halved_algorithm():
    entry = register_algorithm(
        Algorithm("ippo_half", "torchrl.objectives.multiagent:IPPOLoss", "decentralised", update=halved_epochs)
    )
    UPDATES.clear()
    yield entry
    ALGORITHMS.pop("ippo_half")


@pytest.mark.parametrize("seeds", ["[0]", "[0,1]"])
def test_an_algorithm_is_one_table_line_and_its_update_mode_runs_in_the_trainer(halved_algorithm, tmp_path, seeds):
    overrides = [o for o in TINY if o != "env.kwargs={}"] + ["train.num_epochs=4", "loss.algorithm=ippo_half"]
    assert main(["train", *overrides, f"train.seeds={seeds}", f"log.root={tmp_path}", "log.name=half"]) == 0
    n = seeds.count(",") + 1
    assert UPDATES == [(n, 2), (n, 2)]  # the mode's own update, each iteration, on every seed at once
    assert "algorithm: ippo_half" in (tmp_path / "half-seed0" / "config.yaml").read_text()
