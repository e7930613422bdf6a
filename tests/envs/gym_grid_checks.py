"""What the LBF and RWARE tests share: the library's own env stepped beside ours, and the tiny runs' options.

:func:`side_by_side` builds ``env.kind=lbf|rware`` with two copies through ``make_env`` and, beside it,
two of the library's own games seeded as the module docstring of :mod:`marl_ppo.envs.gym_grids` says
(copy ``i``: ``SeedSequence([seed, i])``); both get the same scripted actions, and every step's
observations, rewards and dones must be equal, the resets after an episode's end included.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import torch
from gymnasium.envs.registration import load_env_creator

from marl_ppo.envs import EnvConfig, make_env
from marl_ppo.envs.gym_grids import LIBRARIES, gym_id

COPIES = 2
RUN = ["train.num_threads=1", "model.hidden=[16]", "log.progress=false", "log.plot=false"]


def tiny(kind: str, scenario: str, max_steps: int = 10) -> list[str]:
    """Overrides of a run of 2 copies, 4 iterations of 40 frames, on ``scenario``."""
    return [
        f"env.kind={kind}", f"env.scenario={scenario}", "env.kwargs={}", "env.num_envs=2", f"env.max_steps={max_steps}",
        "train.frames_per_batch=40", "train.total_frames=160", "train.minibatch_size=20", "train.num_epochs=2",
        "log.eval_episodes=2", *RUN,
    ]  # fmt: skip


def library_game(kind: str, scenario: str, max_steps: int):
    """The library's own game: ``gymnasium.make`` of the registered id where ``max_steps`` is the registered
    limit, else the library's class with the registered keywords and ``max_steps`` as its own limit."""
    library = LIBRARIES[kind]
    spec = gymnasium.spec(gym_id(library, scenario))
    if spec.kwargs[library.steps_kwarg] == max_steps:
        return gymnasium.make(spec.id, disable_env_checker=True)
    return load_env_creator(spec.entry_point)(**{**spec.kwargs, library.steps_kwarg: max_steps})


def side_by_side(kind: str, scenario: str, *, max_steps: int, seed: int, steps: int, p=None) -> dict[str, float]:
    """Steps ours and the library's games ``steps`` times with the same random actions (``p``: their odds);
    asserts each step equal. Returns the endings seen (``terminated``, ``truncated``) and the reward summed."""
    env = make_env(EnvConfig(kind=kind, scenario=scenario, num_envs=COPIES, max_steps=max_steps, kwargs={}), seed=seed)
    games = [library_game(kind, scenario, max_steps) for _ in range(COPIES)]
    seeds = [int(np.random.SeedSequence([seed, i]).generate_state(1)[0]) for i in range(COPIES)]
    rngs = [np.random.default_rng([seed, i]) for i in range(COPIES)]
    n_agents, n_actions = len(games[0].action_space), int(games[0].action_space[0].n)
    seen = {"terminated": 0, "truncated": 0, "reward": 0.0}
    td = env.reset()
    for i, game in enumerate(games):
        obs, _ = game.reset(seed=seeds[i])
        assert np.array_equal(td["agents", "observation"][i].numpy(), np.stack(obs))
    try:
        for t in range(steps):
            actions = np.stack([rng.choice(n_actions, n_agents, p=p) for rng in rngs])
            td["agents", "action"] = torch.as_tensor(actions)
            td, after = env.step_and_maybe_reset(td)
            for i, game in enumerate(games):
                obs, rewards, done, cut, _ = game.step(actions[i].tolist())
                out = td["next"][i]
                where = f"copy {i}, step {t}"
                assert np.array_equal(out["agents", "observation"].numpy(), np.stack(obs)), where
                assert out["agents", "reward"].flatten().tolist() == np.asarray(rewards, np.float32).tolist(), where
                assert bool(out["done"]) == (done or cut), where
                if done or cut:
                    # LBF: every food eaten ends it (terminated), its limit with food left cuts it; RWARE: its limit
                    eaten = kind == "lbf" and not game.unwrapped.field.any()
                    assert (bool(out["terminated"]), bool(out["truncated"])) == (eaten, not eaten), where
                    seen["terminated" if eaten else "truncated"] += 1
                    obs, _ = game.reset()
                    assert np.array_equal(after["agents", "observation"][i].numpy(), np.stack(obs)), where
                else:
                    assert not out["terminated"] and not out["truncated"], where
                seen["reward"] += float(np.sum(rewards))
            td = after
    finally:
        env.close()
    return seen
