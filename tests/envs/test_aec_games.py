"""``AecGames`` gives, value for value, what torchrl's ``SerialEnv`` of wrapped game copies gives.

Covered, on real PettingZoo classic games: rollouts over many episode ends (copies ending at
different steps, so partial resets) with every key, dtype and value equal, and the same specs, for
tic-tac-toe (both seat groupings), connect four, rock-paper-scissors (a one-hot observation) and go;
each copy seeded with torchrl's chain within 31 bits; a whole self-play run against a pool ending
with the same parameters and logs; and what it declines (a parallel env) left to ``ParallelGames``.
"""

from __future__ import annotations

import functools

import pytest
import torch
from torchrl._utils import seed_generator
from torchrl.envs import SerialEnv

import marl_ppo.envs.pettingzoo as pettingzoo_adapter
from marl_ppo.config import load_config
from marl_ppo.envs import EnvConfig
from marl_ppo.envs.aec_games import AecGames, aec_games_refusal
from marl_ppo.envs.parallel_games import ParallelGames
from marl_ppo.envs.pettingzoo import copy_factory, make_pettingzoo
from marl_ppo.groups.specs import group_map
from marl_ppo.run.trainer import Trainer
from tests.same_run import assert_same_run

GAMES = [
    ("tictactoe_v3", {}),
    ("tictactoe_v3", {"group_map": "all_in_one_group"}),
    ("connect_four_v3", {}),
    ("rps_v2", {}),
    ("go_v5", {"board_size": 5}),
]


def _legal_random(env):
    """A policy drawing each agent's action uniformly among its legal ones (global torch RNG)."""

    def policy(td):
        for group in group_map(env):  # a SerialEnv reports one map per copy
            mask = td.get((group, "action_mask"), None)
            if mask is None:
                n = env.full_action_spec[group, "action"].space.n
                mask = torch.ones(*td.get((group, "mask")).shape, n)
            flat = mask.float().reshape(-1, mask.shape[-1])
            td.set((group, "action"), torch.multinomial(flat, 1).reshape(mask.shape[:-1]))
        return td

    return policy


def _rollout(cfg, lean: bool, steps: int):
    env = make_pettingzoo(cfg, seed=7, num_envs=4, lean=lean)
    assert isinstance(env, AecGames if lean else SerialEnv)
    torch.manual_seed(0)
    td = env.rollout(steps, _legal_random(env), break_when_any_done=False)
    specs = [env.full_observation_spec, env.full_action_spec, env.full_reward_spec, env.full_done_spec]
    env.close()
    return td, specs


@pytest.mark.parametrize(
    "scenario,kwargs", GAMES, ids=["tictactoe", "tictactoe-one-group", "connect_four", "rps", "go"]
)
def test_aec_games_give_serial_envs_data(scenario, kwargs):
    cfg = EnvConfig(kind="pettingzoo", scenario=scenario, kwargs=kwargs)
    steps = 60 if scenario == "go_v5" else 150
    expected, expected_specs = _rollout(cfg, lean=False, steps=steps)
    got, specs = _rollout(cfg, lean=True, steps=steps)
    assert specs == expected_specs
    keys = sorted(expected.keys(True, True), key=str)
    assert sorted(got.keys(True, True), key=str) == keys
    for key in keys:
        assert got.get(key).dtype == expected.get(key).dtype, key
        assert torch.equal(got.get(key), expected.get(key)), key
    done = expected.get(("next", "done")).squeeze(-1)  # [envs, T]
    assert done.sum() >= 4
    if scenario != "rps_v2":  # rock-paper-scissors's games all last the same number of rounds
        assert (done.any(0) & ~done.all(0)).any()  # copies end apart: partial resets


def test_each_copy_is_seeded_with_torchrls_chain_within_31_bits():
    cfg = EnvConfig(kind="pettingzoo", scenario="tictactoe_v3", kwargs={})
    env = make_pettingzoo(cfg, seed=2**31 - 1, num_envs=3)
    chained = [2**31 - 1]
    for _ in range(2):
        chained.append(seed_generator(chained[-1]))
    assert env.seeds == [s % 2**31 for s in chained]
    assert env.set_seed(5) == seed_generator(seed_generator(seed_generator(5)))  # as SerialEnv.set_seed returns
    env.close()


def test_a_parallel_env_is_declined_and_left_to_parallel_games():
    cfg = EnvConfig(kind="pettingzoo", scenario="simple_spread_v3", kwargs={"N": 2}, max_steps=5)
    copy = copy_factory(cfg)(0)
    assert "not a turn-based (AEC)" in aec_games_refusal(copy)
    copy.close()
    env = make_pettingzoo(cfg, seed=0, num_envs=2)
    assert isinstance(env, ParallelGames)
    env.close()


def test_a_self_play_run_against_a_pool_is_the_same_either_way(tmp_path, monkeypatch):
    """The shipped tic-tac-toe config (both seats pooled, a random player in the pool) for four batches,
    a snapshot every two: the same parameters and logged metrics with AecGames as with SerialEnv."""
    overrides = [
        "env.num_envs=4",
        "train.frames_per_batch=96",
        "train.total_frames=384",
        "train.minibatch_size=48",
        "train.num_epochs=2",
        "train.num_threads=1",
        "model.hidden=[16]",
        "pool.every=2",
        "log.eval_every=2",
        "log.eval_episodes=4",
        "log.progress=false",
        "log.plot=false",
    ]
    cfg = load_config("tictactoe", overrides)
    lean = Trainer(cfg, run_dir=tmp_path / "lean")
    assert isinstance(lean.parts.env.base_env, AecGames)
    lean.fit()
    # the env kinds' table looks the adapter up when it builds: patched there, every env of the run is plain
    monkeypatch.setattr(pettingzoo_adapter, "make_pettingzoo", functools.partial(make_pettingzoo, lean=False))
    plain = Trainer(cfg, run_dir=tmp_path / "serial")
    assert isinstance(plain.parts.env.base_env, SerialEnv)
    plain.fit()
    logged = assert_same_run(plain, lean, tmp_path / "serial", tmp_path / "lean")
    assert any("vs_random" in name for name in logged)  # evaluations played on both
    notes = (tmp_path / "lean" / "run.log").read_text()
    assert "env: 4 copies of tictactoe_v3 stepped by AecGames" in notes
    assert "AecGames" not in (tmp_path / "serial" / "run.log").read_text()
