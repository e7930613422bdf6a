"""The memory task (``tests/models/memory_env.py``): its specs, its signals, its known scores, and an MLP
trained by our Trainer staying at chance on it (while it learns the same task with the cue left visible).

The band an MLP must stay in is :func:`memory_env.chance_band`: any memory-less policy's last-step
successes are i.i.d. Bernoulli(1/n_cues), so the mean over E episodes x n agents is 1/n_cues
+- 4 sd with sd = sqrt(p (1-p) / (E n)) (a false alarm about 6e-5 of the time, either side).
"""

from __future__ import annotations

import pytest
import torch
from memory_env import FACTORY, MemoryEnv, chance_band, make_memory_env, memory_config
from torchrl.envs.utils import check_env_specs, step_mdp

from marl_ppo.run.logger import read_scalars
from marl_ppo.run.trainer import Trainer


def test_specs_pass_torchrl_check_env_specs():
    for kwargs in ({}, {"n_agents": 3, "n_cues": 4, "length": 6}, {"cue_always": True}):
        env = MemoryEnv(num_envs=5, seed=1, **kwargs)
        check_env_specs(env)
        assert env.group_map == {"agents": [f"agent_{i}" for i in range(env.n_agents)]}


def test_cue_at_t0_only_reward_at_the_last_step_done_every_length_steps():
    n_envs, n, k, length, episodes = 16, 3, 4, 5, 3
    env = MemoryEnv(num_envs=n_envs, n_agents=n, n_cues=k, length=length, seed=0)
    td = env.rollout(episodes * length, break_when_any_done=False)
    obs, reward = td["agents", "observation"], td["next", "agents", "reward"]
    assert obs.shape == (n_envs, episodes * length, n, k + length) and reward.shape == (n_envs, episodes * length, n, 1)
    assert td["next", "done"].shape == td["next", "terminated"].shape == (n_envs, episodes * length, 1)
    t = torch.arange(episodes * length) % length
    cue_part, clock = obs[..., :k], obs[..., k:]
    assert (cue_part[:, t == 0].sum(-1) == 1).all()  # a one-hot cue at t=0, for every agent
    assert (cue_part[:, t != 0] == 0).all()  # nothing later
    assert (clock.argmax(-1) == t.view(1, -1, 1)).all() and (clock.sum(-1) == 1).all()
    assert (td["next", "done"].squeeze(-1) == (t == length - 1)).all()  # every `length` steps, all envs
    assert (td["next", "terminated"] == td["next", "done"]).all()
    assert (reward[:, t != length - 1] == 0).all()
    cue = cue_part[:, t == 0].argmax(-1)  # [envs, episodes, n]
    answer = td["agents", "action"][:, t == length - 1]
    assert (reward[:, t == length - 1].squeeze(-1) == (answer == cue).float()).all()
    assert len({tuple(c.flatten().tolist()) for c in cue.unbind(1)}) == episodes  # fresh cues every episode


def test_seeded_and_deterministic():
    def cues(seed):
        env = MemoryEnv(num_envs=32, length=3, seed=0)
        env.set_seed(seed)
        return env.rollout(9, break_when_any_done=False)["agents", "observation"][:, ::3, :, :2]

    assert torch.equal(cues(3), cues(3)) and not torch.equal(cues(3), cues(4))
    a, b = make_memory_env(num_envs=8, seed=7, device="cpu", max_steps=4), MemoryEnv(num_envs=8, length=4, seed=7)
    assert torch.equal(a.reset()["agents", "observation"], b.reset()["agents", "observation"])


def _episode_scores(env: MemoryEnv, policy) -> torch.Tensor:
    """Each agent's return over one episode of every env, with ``policy(obs, t) -> action``."""
    td = env.reset()
    total = torch.zeros(env.batch_size[0], env.n_agents)
    for t in range(env.length):
        td.set(("agents", "action"), policy(td.get(("agents", "observation")), t))
        td = env.step(td)
        total += td.get(("next", "agents", "reward")).squeeze(-1)
        assert bool(td.get(("next", "done")).all()) == (t == env.length - 1)
        td = step_mdp(td)
    return total


def test_remembering_policy_scores_1_random_scores_chance():
    n_envs, k = 2000, 3
    env = MemoryEnv(num_envs=n_envs, n_agents=2, n_cues=k, length=4, seed=0)
    stored = {}

    def remembering(obs, t):  # "cheats" by keeping the cue of the first observation
        if t == 0:
            stored["cue"] = obs[..., :k].argmax(-1)
        return stored["cue"]

    assert (_episode_scores(env, remembering) == 1).all()
    generator = torch.Generator().manual_seed(1)
    score = _episode_scores(env, lambda obs, t: torch.randint(k, obs.shape[:-1], generator=generator)).mean().item()
    low, high = chance_band(k, 2, n_envs)
    assert low < score < high, (score, low, high)
    # a fixed answer (what a deterministic memory-less policy gives at the last step) is at chance too
    score = _episode_scores(env, lambda obs, t: torch.zeros(obs.shape[:-1], dtype=torch.long)).mean().item()
    assert low < score < high, (score, low, high)


def test_memory_config_names_the_factory_file():
    cfg = memory_config(["env.kwargs.n_cues=3"])
    assert cfg.env.kind == "custom" and cfg.env.factory == FACTORY and FACTORY.endswith("memory_env.py:make_memory_env")
    assert cfg.env.kwargs == {"n_agents": 2, "n_cues": 3} and cfg.env.max_steps == 4 and cfg.train.num_threads == 1


def _train(tmp_path, name: str, overrides: list[str]) -> tuple[dict, float, int]:
    """Trains the memory task; its summary, its last batch's mean episode return, and the episodes in it."""
    cfg = memory_config([f"log.root={tmp_path}", *overrides])
    summary = Trainer(cfg, run_dir=tmp_path / name).fit()
    last_return = read_scalars(tmp_path / name)["collect/agents/episode_reward"][-1][1]
    return summary, last_return, cfg.train.frames_per_batch // cfg.env.max_steps


@pytest.mark.slow
def test_mlp_stays_at_chance_and_learns_the_task_when_the_cue_stays_visible(tmp_path):
    """The same config and budget learn the task when no memory is needed (the control: the cue at
    every step), so staying at chance without it is the MLP's lack of memory, not a config that
    cannot learn. Both runs take a few seconds on one CPU thread."""
    n_agents, n_cues = 2, 2
    # the control: an MLP that sees the cue when it answers learns it
    summary, last, _ = _train(tmp_path, "visible", ["env.kwargs.cue_always=true"])
    assert summary["eval/agents/episode_reward"] > 0.95 and last > 0.9, (summary, last)

    summary, last, batch_episodes = _train(tmp_path, "memory", [])
    episodes = summary["eval/episodes"]
    assert episodes == 1000
    # deterministic evaluation of the final policy over 1 000 episodes: 1/2 +- 0.045
    low, high = chance_band(n_cues, n_agents, episodes)
    assert low < summary["eval/agents/episode_reward"] < high, (summary, low, high)
    # the last training batch (256 episodes, sampled actions): 1/2 +- 0.088
    low, high = chance_band(n_cues, n_agents, batch_episodes)
    assert low < last < high, (last, low, high, batch_episodes)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_recurrent_policy_learns_the_cue_the_mlp_cannot(tmp_path, kind):
    """The same config and budget as the MLP above, with a recurrent policy and critic
    (chunks of one episode): it remembers the cue and names it, far above the chance band."""
    summary, last, batch_episodes = _train(tmp_path, kind, [f"model.kind={kind}", "model.seq_len=4"])
    _, high = chance_band(2, 2, summary["eval/episodes"])
    assert summary["eval/agents/episode_reward"] > 0.9 > high, summary
    assert last > chance_band(2, 2, batch_episodes)[1], last
