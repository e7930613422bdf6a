"""Multi-Agent MuJoCo (``gymnasium-robotics``' ``mamujoco_v1``, PettingZoo's parallel API): ``env.kind=mamujoco``.

``env.scenario`` is the robot (``HalfCheetah``, ``Ant``, ``Walker2d``, ...), ``env.kwargs.agent_conf``
how its joints are split among agents (``2x3``: two agents of three joints), ``env.kwargs.agent_obsk``
how far along the body an agent sees (1 by default), and any other keyword of ``mamujoco_v1.parallel_env``.
Episodes are truncated at ``env.max_steps`` (MuJoCo's own 1 000 by default in the shipped configs).
Videos (``log.video``, ``marl-ppo eval --video``) are MuJoCo's own frames (480 x 480; ``env.kwargs``
``width``/``height`` change it), drawn offscreen through OpenGL: ``MUJOCO_GL=egl`` unless set (EGL
on a GPU, or Mesa's software renderer on a CPU, about 0.1 s a frame here).
``env.state=true`` adds the scenario's global state (``state()``: every joint's position and velocity,
float32) as the root entry ``state``, for a critic that reads it (``model.critic_inputs``).
The agents are named ``agent_<i>``, so torchrl groups them as one group ``agent``; with
``model.share_params=false`` each has its own weights, and HAPPO updates them one after another.

torchrl 0.14.1's PettingZoo wrapper builds its info spec from the first reset and then fails on the
per-agent reward terms MaMuJoCo's ``step`` adds to the infos (``'NoneType' object does not support item
assignment``): the infos are dropped here (they are reward components, not observations).

Needs the optional extra ``mamujoco`` (``pip install 'marl-ppo[mamujoco]'``).
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import numpy as np
from torchrl.envs import EnvBase, ParallelEnv

from marl_ppo.envs.one_loop import in_one_loop
from marl_ppo.envs.options import EnvConfig
from marl_ppo.envs.pettingzoo import wrap_game
from marl_ppo.envs.serial import SerialEnvKeepingThreads
from marl_ppo.envs.workers import workers_ignore_stop_signals
from marl_ppo.options import ConfigError, check_installed

__all__ = ["make_mamujoco", "SCENARIOS"]

# the robots and agent splits of gymnasium-robotics 1.4 (obsk.get_parts_and_edges), for the error of a bad one
SCENARIOS = {
    "HalfCheetah": ["2x3", "6x1"],
    "Ant": ["2x4", "2x4d", "4x2", "8x1"],
    "Walker2d": ["2x3"],
    "Hopper": ["3x1"],
    "Humanoid": ["9|8"],
    "Swimmer": ["2x1"],
    "Reacher": ["2x1"],
    "Pusher": ["3p"],
    "CoupledHalfCheetah": ["1p1"],
    "ManySegmentSwimmer": ["<n>x<k>"],
    "ManySegmentAnt": ["<n>x<k>"],
}


def scenario_names() -> list[str]:
    """The shipped MaMuJoCo scenarios (``env.scenario``)."""
    return list(SCENARIOS)


def _without_infos(game: Any) -> Any:
    from pettingzoo.utils.wrappers import BaseParallelWrapper

    class _NoInfos(BaseParallelWrapper):
        def state(self) -> np.ndarray:  # float64 from MuJoCo; float32 as the observations and the critic
            return self.env.state().astype(np.float32)

        def reset(self, seed=None, options=None):
            observations, _ = self.env.reset(seed=seed, options=options)
            return observations, {a: {} for a in observations}

        def step(self, actions):
            observations, rewards, terminations, truncations, _ = self.env.step(actions)
            return observations, rewards, terminations, truncations, {a: {} for a in observations}

        def render(self):
            try:
                return self.env.render()
            except Exception as err:  # mujoco.FatalError, gymnasium's RuntimeError: no OpenGL context to draw in
                raise RuntimeError(
                    f"MaMuJoCo draws its frames with OpenGL (MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}) and could "
                    f"not: {type(err).__name__}: {err}. Set MUJOCO_GL=egl (a GPU, or Mesa's libEGL), osmesa "
                    "(libOSMesa) or glfw (a display) before the run starts"
                ) from err

    return _NoInfos(game)


def _game(cfg: EnvConfig) -> Any:
    check_installed(["env.kind: mamujoco"])
    from gymnasium_robotics import mamujoco_v1

    kwargs = {"agent_conf": None, "agent_obsk": 1, **cfg.kwargs, "max_episode_steps": cfg.max_steps}
    if kwargs.get("render_mode") is not None:
        # Without MUJOCO_GL, gymnasium tries glfw first, which without a display leaves PyOpenGL on a
        # platform EGL cannot use (mujoco.FatalError at the first frame). EGL draws headless, on a GPU
        # or with Mesa's software renderer; a MUJOCO_GL the user set is kept. Read at the first frame.
        os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        return mamujoco_v1.parallel_env(cfg.scenario, **kwargs)
    except TypeError as err:
        raise ConfigError(f"env.kwargs for MaMuJoCo {cfg.scenario!r}: {err}") from None
    except Exception as err:  # gymnasium-robotics raises bare Exception/NotImplementedError for an unknown split
        known = ", ".join(f"{s} {c}" for s, c in SCENARIOS.items())
        raise ConfigError(
            f"MaMuJoCo has no scenario {cfg.scenario!r} with agent_conf {kwargs['agent_conf']!r} ({err}); "
            f"scenarios and their agent_conf: {known}"
        ) from None


def _copy(cfg: EnvConfig, seed: int) -> EnvBase:
    return wrap_game(_without_infos(_game(cfg)), None, seed, done_on_any=False, return_state=cfg.state)


def make_mamujoco(cfg: EnvConfig, *, seed: int, num_envs: int, device=None, lean: bool = True) -> EnvBase:
    """``num_envs`` copies of the MaMuJoCo scenario ``cfg`` names, stepped in one loop by
    :class:`~marl_ppo.envs.parallel_games.ParallelGames` (``lean``, the default), else in a ``SerialEnv``
    (``ParallelEnv`` with ``env.parallel=true``)."""
    if lean and not cfg.parallel:
        env = in_one_loop(partial(_copy, cfg), seed=seed, num_envs=num_envs)
        if env is not None:
            return env
    _copy(cfg, seed).close()  # a bad scenario or split fails here, in this process, in one line
    fns = [partial(_copy, cfg, seed + i) for i in range(num_envs)]
    env = (ParallelEnv if cfg.parallel else SerialEnvKeepingThreads)(num_envs, fns)
    with workers_ignore_stop_signals():
        env.set_seed(seed)
    return env
