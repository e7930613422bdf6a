"""Action masks end to end, on PettingZoo classic turn-based games (real envs, no mocks).

Covered:

* the adapter: ``env.kind=pettingzoo`` builds classic games (``tictactoe_v3``, ``connect_four_v3``)
  through torchrl's ``PettingZooWrapper`` with ``use_mask=True``: by default one group per player,
  with ``env.kwargs.group_map=all_in_one_group`` one group ``agents`` of both players; each group
  has a legal-action mask ``(group, "action_mask")``, an acting-agent mask ``(group, "mask")`` and a
  flat float observation ``[*B, n_agents, obs_dim]``;
* the policy: its distribution is a ``MaskedCategorical`` fed with the env's mask; known answer:
  with exactly one legal action, that action is sampled (and is the mode) with log-prob 0 and
  every other action has probability 0;
* a rollout of many steps with the random-init policy (sampling, then deterministic): every action
  of the agent whose turn it is is legal under the mask in effect at that step, exactly one agent
  acts per step, and the masks do rule moves out (the check is not vacuous);
* the loss counts only the acting agent: changing a non-acting agent's stored log-prob leaves every
  ``loss_*`` term unchanged, changing an acting agent's changes the objective;
* a tiny Trainer run from ``configs/tictactoe_two_groups.yaml`` (and connect four with both players in one
  group) finishes 2 iterations with finite losses per group and writes its checkpoints;
* bad input fails before any training: an unknown task (with suggestions from both families),
  a classic task whose package is missing, a bad ``group_map``.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
from torchrl.envs import ExplorationType, set_exploration_type
from torchrl.modules.distributions import MaskedCategorical

from marl_ppo import RewardTable
from marl_ppo.config import ConfigError, EnvConfig, load_config
from marl_ppo.core.router import GroupRouter
from marl_ppo.envs import classic_tasks, make_env, mpe_tasks, pettingzoo_tasks
from marl_ppo.groups import read_group_specs
from marl_ppo.models import build_actor
from marl_ppo.run.logger import read_scalars
from marl_ppo.run.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]


def classic(scenario: str = "tictactoe_v3", num_envs: int = 2, **kwargs) -> EnvConfig:
    return EnvConfig(
        kind="pettingzoo", scenario=scenario, num_envs=num_envs, max_steps=9, continuous_actions=False, kwargs=kwargs
    )


@pytest.fixture(scope="module")
def tictactoe():
    env = make_env(classic(num_envs=4), seed=0)
    yield env
    env.close()


# -- the adapter and the group specs ------------------------------------------------------------------


def test_classic_tasks_are_listed_next_to_mpe():
    assert {"tictactoe_v3", "connect_four_v3"} <= set(classic_tasks())
    assert not set(classic_tasks()) & set(mpe_tasks())
    assert pettingzoo_tasks() == mpe_tasks() + classic_tasks()


def test_group_specs_of_a_classic_game(tictactoe):
    groups = read_group_specs(tictactoe)
    assert list(groups) == ["player_1", "player_2"]  # torchrl's default for AEC envs: one group per player
    for g, spec in groups.items():
        assert spec.agents == (g,)
        assert spec.action_mask_key == (g, "action_mask")
        assert spec.keys.mask == (g, "mask")
        assert spec.observation_keys == ((g, "observation"),)
        assert spec.observation_shape == (1, 18)  # the 3x3x2 board, flattened
        assert spec.raw_reward_key == (g, "reward") and spec.raw_done_key == (g, "done")
        assert tictactoe.full_observation_spec[g, "observation"].dtype == torch.float32
        assert tictactoe.full_observation_spec[g, "action_mask"].shape == (4, 1, 9)


def test_all_in_one_group_layout():
    env = make_env(classic("connect_four_v3", group_map="all_in_one_group"), seed=0)
    groups = read_group_specs(env)
    assert list(groups) == ["agents"] and groups["agents"].agents == ("player_0", "player_1")
    assert groups["agents"].observation_shape == (2, 6 * 7 * 2)
    assert groups["agents"].action_mask_key == ("agents", "action_mask")
    td = env.rollout(5, build_actor(groups["agents"], hidden=(8,)), break_when_any_done=False)
    assert (td["agents", "mask"].sum(-1) == 1).all(), "exactly one player acts at each step"
    env.close()


def test_actor_distribution_is_masked(tictactoe):
    group = read_group_specs(tictactoe)["player_1"]
    actor = build_actor(group, hidden=(16,))
    assert ("player_1", "action_mask") in actor.in_keys
    td = tictactoe.reset()
    dist = actor.get_dist(td)
    assert isinstance(dist, MaskedCategorical)
    assert torch.equal(dist.mask, td["player_1", "action_mask"])


def test_one_legal_action_known_answer(tictactoe):
    """With a mask allowing only action 4: it is sampled and is the mode, with log-prob 0; all others have prob 0."""
    group = read_group_specs(tictactoe)["player_1"]
    actor = build_actor(group, hidden=(16,))
    td = tictactoe.reset()
    td.set(("player_1", "observation"), torch.randn(4, 1, 18) * 3)  # arbitrary logits
    only = torch.zeros(4, 1, 9, dtype=torch.bool)
    only[..., 4] = True
    td.set(("player_1", "action_mask"), only)
    dist = actor.get_dist(td)
    assert torch.equal(dist.probs[..., 4], torch.ones(4, 1))
    assert torch.equal(dist.probs[..., [0, 1, 2, 3, 5, 6, 7, 8]], torch.zeros(4, 1, 8))
    for _ in range(5):
        out = actor(td.clone())
        assert (out["player_1", "action"] == 4).all()
        assert torch.equal(out["player_1", "action_log_prob"], torch.zeros(4, 1))
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        assert (actor(td.clone())["player_1", "action"] == 4).all()
    # and the unmasked network would have preferred another action somewhere
    logits = actor.module[0](td.clone())["player_1", "logits"]
    assert (logits.argmax(-1) != 4).any()


# -- rollouts: only legal actions -------------------------------------------------------------------------


def _assert_legal(td, groups) -> None:
    acting = torch.stack([td[g, "mask"] for g in groups], -1).sum((-2, -1))
    assert (acting == 1).all(), "exactly one agent acts at each step"
    masked_out = 0
    for g in groups:
        action, legal, active = td[g, "action"], td[g, "action_mask"], td[g, "mask"]
        taken_is_legal = legal.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        assert taken_is_legal[active].all(), f"group {g}: an illegal action was taken"
        # agents that are not acting get an all-True mask (torchrl's convention): never an all-False row
        assert legal[~active].all()
        assert legal.any(-1).all()
        masked_out += (~legal[active]).sum().item()
    return masked_out


@pytest.mark.parametrize("mode", [ExplorationType.RANDOM, ExplorationType.DETERMINISTIC], ids=["sample", "mode"])
def test_policy_only_takes_legal_actions(tictactoe, mode):
    groups = read_group_specs(tictactoe)
    router = GroupRouter.from_specs(groups, hidden=(16,))
    with torch.no_grad(), set_exploration_type(mode):
        td = tictactoe.rollout(150, router.policy, break_when_any_done=False)
    assert td.batch_size == (4, 150)
    masked_out = _assert_legal(td, list(groups))
    # not vacuous: many moves were illegal at the steps they were ruled out, and games ended
    assert masked_out > 4 * 150 * 2
    assert td["next", "done"].sum() > 20
    if mode == ExplorationType.RANDOM:
        # the games are real: as in uniformly random play, the first player wins more often than not
        done = td["next", "done"].squeeze(-1)
        p1 = td["next", "player_1", "episode_reward"][done].flatten()
        assert set(p1.tolist()) <= {-1.0, 0.0, 1.0}
        assert (p1 == 1).float().mean() > 0.4


def test_loss_counts_only_the_acting_agent(tictactoe):
    groups = read_group_specs(tictactoe)
    table = RewardTable.own_rewards(list(groups)).bind(groups, tictactoe)
    router = GroupRouter.from_specs(groups, hidden=(16,), entropy_coeff=0.01)
    with torch.no_grad():
        batch = table(tictactoe.rollout(12, router.policy, break_when_any_done=False))
    router.compute_advantages(batch)
    flat = batch.reshape(-1)
    base = router(flat)

    def losses_with_log_prob_shift(active: bool):
        td = flat.clone()
        lp = td["player_1", "action_log_prob"]
        where = td["player_1", "mask"] if active else ~td["player_1", "mask"]
        td["player_1", "action_log_prob"] = torch.where(where, lp - 0.5, lp)
        return router(td)

    inactive = losses_with_log_prob_shift(active=False)
    for term in ("loss_objective", "loss_critic", "loss_entropy"):
        assert torch.equal(inactive["player_1", term], base["player_1", term]), term
    active = losses_with_log_prob_shift(active=True)
    assert not torch.equal(active["player_1", "loss_objective"], base["player_1", "loss_objective"])


# -- the trainer -----------------------------------------------------------------------------------------------


TINY = [
    "env.num_envs=4",
    "train.frames_per_batch=40",
    "train.total_frames=80",
    "train.num_epochs=2",
    "train.minibatch_size=20",
    "model.hidden=[16]",
    "log.eval_every=1",
    "log.eval_episodes=2",
    "log.checkpoint_every=1",
    "log.progress=false",
    "log.plot=false",
]


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ([], {"player_1": 1, "player_2": 1}),
        (["env.scenario=connect_four_v3", "env.kwargs.group_map=all_in_one_group", "reward_table=null"], {"agents": 2}),
    ],
    ids=["tictactoe-config", "connect_four-one-group"],
)
def test_trainer_runs_on_a_classic_game(tmp_path, overrides, expected):
    cfg = load_config(ROOT / "configs" / "tictactoe_two_groups.yaml", TINY + overrides)
    run = tmp_path / "run"
    trainer = Trainer(cfg, run_dir=run)
    assert {g: s.n_agents for g, s in trainer.parts.groups.items()} == expected
    assert all(s.action_mask_key is not None for s in trainer.parts.groups.values())
    summary = trainer.fit()
    assert summary["iteration"] == 2 and summary["frames"] == 80
    scalars = read_scalars(run)
    for g in expected:
        for name in ("loss_objective", "loss_critic", "loss_entropy", "entropy"):
            values = [v for _, v in scalars[f"train/{g}/{name}"]]
            assert len(values) == 2 and all(math.isfinite(v) for v in values), (g, name, values)
        assert math.isfinite(summary[f"eval/{g}/episode_reward"])
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_00001.pt", "iter_00002.pt", "last.pt"]
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert state["iteration"] == 2
    assert all(torch.isfinite(v).all() for v in state["router"].values() if v.is_floating_point())


# -- bad input -----------------------------------------------------------------------------------------------


def test_unknown_classic_task_suggests_from_both_families(tmp_path):
    with pytest.raises(ConfigError) as info:
        Trainer(
            load_config(ROOT / "configs" / "tictactoe_two_groups.yaml", TINY + ["env.scenario=tictactoe_v2"]),
            run_dir=tmp_path / "run",
        )
    msg = str(info.value)
    assert "unknown PettingZoo task 'tictactoe_v2'" in msg
    assert "did you mean" in msg and "'tictactoe_v3'" in msg
    assert "MPE: " in msg and "simple_spread_v3" in msg and "classic: " in msg and "connect_four_v3" in msg
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.skipif(importlib.util.find_spec("chess") is not None, reason="chess is installed here")
def test_classic_task_with_a_missing_package_says_so():
    with pytest.raises(ConfigError, match=r"'chess_v6' needs a package that is not installed.*chess"):
        make_env(classic("chess_v6"), seed=0)


def test_bad_group_map_is_refused():
    with pytest.raises(ConfigError, match="group_map must be one of"):
        make_env(classic(group_map="by_colour"), seed=0)
