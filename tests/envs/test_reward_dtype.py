"""Rewards of any Python or numpy number type reach the batch as the reward spec's dtype, in every step path.

PettingZoo does not fix a reward's type: Knights-Archers-Zombies gives Python ``int`` rewards (and
PettingZoo's AEC-to-parallel conversion starts each sum from the ``int`` 0), other games numpy
integers or floats. A step whose live agents' rewards were all Python ints built an ``int64``
tensor in the lean step, and writing it into the ``float32`` rows of the agents still in the game
failed ("Index put requires the source and destination dtypes match, got Float ... Long"): a
Knights-Archers-Zombies image run stopped at its first periodic evaluation.

The games here are this module's own (the module is also an ``env.scenario``: ``parallel_env``):
:class:`RewardKinds` (parallel, three runners, ``runner_2`` leaves after step 2) and
:class:`TurnKinds` (turn-based, two players). Step ``t``'s rewards are all of one type,
``KINDS[t % 5]``: Python ``int``, ``np.int64``, ``float``, ``np.int32``, ``np.float64``, each
worth :func:`reward_of` ``(agent index, t)``. Each step path (the lean step of one copy,
``ParallelGames``, ``SerialEnv`` of lean copies, ``AecGames``, ``SerialEnv`` of turn-based copies)
must give ``float32`` rewards equal to that, and a CLI run with image observations (the adapter's
``SerialEnv``, as Knights-Archers-Zombies with images) must evaluate every iteration and finish.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Discrete
from pettingzoo import AECEnv, ParallelEnv
from torchrl.envs import SerialEnv

from marl_ppo.cli import main
from marl_ppo.envs.aec_games import AecGames
from marl_ppo.envs.lean_step import LeanParallelStep
from marl_ppo.envs.one_loop import in_one_loop
from marl_ppo.envs.options import EnvConfig
from marl_ppo.envs.parallel_games import ParallelGames
from marl_ppo.envs.pettingzoo import copy_factory, make_pettingzoo, wrap_game
from marl_ppo.envs.serial import SerialEnvKeepingThreads
from marl_ppo.groups.specs import group_map
from marl_ppo.run.logger import read_scalars

KINDS = (int, np.int64, float, np.int32, np.float64)  # step t's rewards are all KINDS[t % 5]
LEAVES = 2  # runner_2 leaves the game at this step: the lean step then writes the rows of the others
SCENARIO = "tests.envs.test_reward_dtype"


def reward_of(index: int, t: int) -> float:
    """Agent ``index``'s reward at step ``t`` (the float kinds carry a fraction, so truncation would show)."""
    return index + t + (0.5 if KINDS[t % len(KINDS)] in (float, np.float64) else 0.0)


def typed_reward(index: int, t: int):
    """:func:`reward_of` as step ``t``'s kind: a Python ``int``, a numpy integer, a float."""
    kind = KINDS[t % len(KINDS)]
    value = reward_of(index, t)
    return kind(int(value)) if kind in (int, np.int64, np.int32) else kind(value)


class RewardKinds(ParallelEnv):
    """Three runners observing ``[t, index, 1]`` (or, with ``image``, a 6x6 RGB frame drawn from them);
    ``runner_2`` terminates at step :data:`LEAVES`, the others are truncated at ``max_cycles``."""

    metadata = {"name": "reward_kinds_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, max_cycles: int = 8, image: bool = False) -> None:
        self.possible_agents = [f"runner_{i}" for i in range(3)]
        self.agents: list[str] = []
        self.max_cycles, self.image, self.t = max_cycles, image, 0
        self._obs = Box(0, 255, (6, 6, 3), np.uint8) if image else Box(0.0, 100.0, (3,), np.float32)

    def observation_space(self, agent: str) -> Box:
        return self._obs

    def action_space(self, agent: str) -> Discrete:
        return Discrete(2)

    def _observe(self, agent: str) -> np.ndarray:
        index = self.possible_agents.index(agent)
        if not self.image:
            return np.array([self.t, index, 1.0], np.float32)
        frame = np.zeros((6, 6, 3), np.uint8)
        frame[: self.t % 6 + 1, :, 0] = 200  # rows lit by the step: the frame changes within an episode
        frame[:, : index + 1, 1] = 100
        return frame

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents, self.t = list(self.possible_agents), 0
        return {a: self._observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        index = self.possible_agents.index
        observations = {a: self._observe(a) for a in self.agents}
        rewards = {a: typed_reward(index(a), self.t) for a in self.agents}
        terminations = {a: a == "runner_2" and self.t >= LEAVES for a in self.agents}
        truncations = {a: self.t >= self.max_cycles for a in self.agents}
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        return observations, rewards, terminations, truncations, infos


def parallel_env(max_cycles: int = 8, image: bool = False) -> RewardKinds:
    """This module as a PettingZoo env module (``env.scenario=tests.envs.test_reward_dtype``)."""
    return RewardKinds(max_cycles=max_cycles, image=image)


class TurnKinds(AECEnv):
    """Two players moving in turn, observing ``[moves, index, 1]``; the mover is rewarded, the other gets
    a zero of the same kind; both are truncated after ``max_cycles`` moves."""

    metadata = {"name": "turn_kinds_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self, max_cycles: int = 7) -> None:
        super().__init__()
        self.possible_agents = ["player_0", "player_1"]
        self.max_cycles, self.moves = max_cycles, 0
        self._obs = Box(0.0, 100.0, (3,), np.float32)

    def observation_space(self, agent: str) -> Box:
        return self._obs

    def action_space(self, agent: str) -> Discrete:
        return Discrete(2)

    def observe(self, agent: str) -> np.ndarray:
        return np.array([self.moves, self.possible_agents.index(agent), 1.0], np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.agents, self.moves = list(self.possible_agents), 0
        self.rewards = {a: 0 for a in self.agents}
        self._cumulative_rewards = {a: 0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = self.agents[0]

    def step(self, action) -> None:
        if self.terminations[self.agent_selection] or self.truncations[self.agent_selection]:
            self._was_dead_step(action)
            return
        mover = self.agent_selection
        self.moves += 1
        zero = KINDS[self.moves % len(KINDS)](0)
        index = self.possible_agents.index
        self.rewards = {a: typed_reward(index(a), self.moves) if a == mover else zero for a in self.agents}
        self.truncations = {a: self.moves >= self.max_cycles for a in self.agents}
        self.agent_selection = self.agents[1 - index(mover)]
        self._accumulate_rewards()


def _make_turns(seed: int):
    """One wrapped copy of :class:`TurnKinds`, as the adapter wraps a turn-based game."""
    return wrap_game(TurnKinds(), None, seed)


CFG = EnvConfig(kind="pettingzoo", scenario=SCENARIO, max_steps=8, continuous_actions=False, kwargs={})


def _rollout(env, steps: int = 20):
    torch.manual_seed(0)
    td = env.rollout(steps, break_when_any_done=False)
    spec_dtypes = {g: env.full_reward_spec[g, "reward"].dtype for g in group_map(env)}
    env.close()
    return td, spec_dtypes


def _check_runners(td, spec_dtypes) -> None:
    """Every runner's reward is ``float32`` (the spec's) and :func:`reward_of` where it was in the game."""
    assert spec_dtypes == {"runner": torch.float32}
    reward, obs = td["next", "runner", "reward"], td["next", "runner", "observation"]
    assert reward.dtype == torch.float32, f"reward dtype {reward.dtype}, expected the spec's float32"
    stepped = obs[..., 2] == 1  # an agent in the game at that step (a departed one observes zeros)
    expected = torch.tensor(
        [reward_of(int(i), int(t)) for t, i in zip(obs[..., 0].flatten(), obs[..., 1].flatten())]
    ).view(stepped.shape)
    expected = torch.where(stepped, expected, 0.0).unsqueeze(-1)
    assert torch.equal(reward, expected), f"rewards {reward.squeeze(-1)}, expected {expected.squeeze(-1)}"
    # the case that failed: steps of Python-int rewards with runner_2 gone
    t = obs[..., 0, 0]
    assert ((t % len(KINDS) == 0) & (t > LEAVES) & ~stepped[..., 2]).any()


def test_the_lean_step_writes_integer_rewards_as_the_specs_dtype(monkeypatch):
    copy = copy_factory(CFG)(0)
    assert copy.lean_plan() is not None, "the game should take the lean step"
    lean = _rollout(copy)
    _check_runners(*lean)
    monkeypatch.setattr(LeanParallelStep, "lean", False)  # torchrl's own step: the same data
    plain = _rollout(copy_factory(CFG)(0))
    assert torch.equal(lean[0]["next", "runner", "reward"], plain[0]["next", "runner", "reward"])


def test_parallel_games_write_integer_rewards_as_the_specs_dtype():
    env = make_pettingzoo(CFG, seed=0, num_envs=3)
    assert isinstance(env, ParallelGames)
    _check_runners(*_rollout(env))


def test_serial_env_of_lean_copies_writes_integer_rewards_as_the_specs_dtype():
    env = make_pettingzoo(CFG, seed=0, num_envs=2, lean=False)
    assert isinstance(env, SerialEnvKeepingThreads)
    _check_runners(*_rollout(env))


@pytest.mark.parametrize("stepper", [AecGames, SerialEnv])
def test_turn_based_games_write_integer_rewards_as_the_specs_dtype(stepper):
    if stepper is AecGames:
        env = in_one_loop(_make_turns, seed=0, num_envs=3)
    else:
        env = SerialEnvKeepingThreads(2, [functools.partial(_make_turns, s) for s in range(2)])
    assert isinstance(env, stepper)
    td, spec_dtypes = _rollout(env, steps=24)
    for j, group in enumerate(["player_0", "player_1"]):
        assert spec_dtypes[group] == torch.float32
        reward, obs = td["next", group, "reward"], td["next", group, "observation"]
        assert reward.dtype == torch.float32, f"{group}'s reward dtype {reward.dtype}, expected float32"
        mask = td[group, "mask"]  # the agent that moved at this step
        moves = obs[..., 0, 0].long()
        expected = torch.tensor([reward_of(j, int(m)) for m in moves.flatten()]).view(moves.shape)
        expected = torch.where(mask[..., 0], expected, 0.0)
        assert torch.equal(reward[..., 0, 0], expected), f"{group}: {reward[..., 0, 0]}, expected {expected}"
    assert td["next", "done"].any()  # episodes ended: resets mid-rollout


@pytest.mark.slow
def test_an_image_run_with_integer_rewards_evaluates_every_iteration(tmp_path, capsys):
    # the Knights-Archers-Zombies image path: images resized in each copy, so the adapter's SerialEnv
    # of lean copies, for training and for each periodic evaluation
    args = [
        "train",
        "env.kind=pettingzoo",
        f"env.scenario={SCENARIO}",
        "env.kwargs={image: true}",
        "env.image.size=[5, 5]",
        "env.continuous_actions=false",
        "env.num_envs=2",
        "env.max_steps=8",
        "model.kind=cnn",
        "model.hidden=[8]",
        "model.options={cnn: {channels: [4], kernels: [3], strides: [1], paddings: [0]}}",
        "train.frames_per_batch=32",
        "train.total_frames=64",
        "train.num_epochs=1",
        "train.minibatch_size=16",
        "train.num_threads=1",
        "log.eval_every=1",
        "log.eval_episodes=2",
        "log.progress=false",
        "log.plot=false",
        f"log.root={tmp_path}",
        "log.name=kinds",
    ]
    assert main(args) == 0, capsys.readouterr().err[-3000:]
    evaluations = read_scalars(tmp_path / "kinds")["eval/runner/episode_reward"]
    assert [frames for frames, _ in evaluations] == [32, 64], f"evaluations at {evaluations}, expected each iteration"
    # the rewards do not depend on the actions: each episode's group return is the mean of the runners' sums
    sums = [sum(reward_of(i, t) for t in range(1, (LEAVES if i == 2 else 8) + 1)) for i in range(3)]
    for _, value in evaluations:
        assert value == pytest.approx(sum(sums) / 3), f"eval return {value}, expected {sum(sums) / 3} (runners {sums})"
