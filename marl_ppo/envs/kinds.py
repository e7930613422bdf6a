"""The env kinds: one table line each, read by ``make_env``, the options, evaluation, video and seeds.

An env kind says how to build a torchrl multi-agent env from an
:class:`~marl_ppo.envs.options.EnvConfig` and what the rest of the package may do with it; nothing
outside its line branches on a kind's name. Adding a kind is one file with its ``make`` function
and one :func:`register_env_kind` call (or a line in :data:`ENV_KINDS`, a
:class:`~marl_ppo.table.Table`):

* ``make`` names a function ``(cfg, *, seed, num_envs, device) -> EnvBase``
  (``"module:function"``, imported on first use so the options load no torch, or the function);
* ``vectorised``: one env object steps all ``num_envs`` copies in one call (VMAS, a custom factory
  taking ``num_envs``); otherwise the copies are separate games (PettingZoo), so an evaluation runs
  at most ``env.num_envs`` of them at once;
* ``renders``: its envs draw frames (``log.video``, ``marl-ppo eval --video``): ``env.render(mode="rgb_array",
  env_index=i)`` gives copy ``i``'s frame (a bool, or a function of the env config: PettingZoo asks the
  game's family); ``render_kwargs`` go into ``env.kwargs`` of the evaluation envs that record one
  (:meth:`EnvKind.for_video`);
* ``gives_state``: ``env.state=true`` is allowed: its envs put the global state at the root entry
  ``state`` (MaMuJoCo builds it; a custom env must give it itself);
* ``own_time_limit``: the env applies ``env.time_limit`` itself (VMAS); otherwise ``make_env``
  folds reported truncations into terminations where ``time_limit=terminate`` asks;
* ``seeds_in_one_env``: ``train.seeds`` may run every seed's copies in one env of ``S x num_envs``;
* ``bounded``: ``env.max_steps`` caps the episodes (a bool, or a function of the env config: PettingZoo
  asks the game's family, :mod:`~marl_ppo.envs.families`);
* ``raw_observations``: ``"module:function"`` giving each group's observation as the env gives it
  before flattening (scripted players read it), or ``None`` (the flat observation);
* which of the env options beyond the common ones it reads: ``takes_factory`` (``env.factory`` names
  the env, ``env.kwargs`` go to it, ``env.scenario`` is unused), ``reads_image`` (``env.image``),
  ``comm_and_multidiscrete`` (``env.comm``, ``env.multidiscrete_actions``), and ``cpu_only``
  (``env.device`` must be ``cpu``);
* ``export_prep``: what a deployed policy does to the game's own observation before the exported graph
  reads it (``"flatten"``: not one float32 vector per agent, flattened; ``"cast"``: cast to float32), and
  ``export_source`` where that observation comes from (the deploy file's words);
* ``scenarios``: ``"module:function"`` listing the valid ``env.scenario`` names (``marl-ppo list``, the tests);
* ``team_reward``: every group gets the team's reward (its score is one group's return, not a sum over agents);
* ``check``: ``"module:function"`` of the env config that refuses parameters outside the library's declared
  ranges (:mod:`~marl_ppo.envs.game_ranges`), run when the env config is made, before native code sees them.

>>> env_kind("vmas").renders, env_kind("pettingzoo").vectorised
(True, False)
>>> env_kind("gym")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: unknown env kind 'gym'; registered: ['custom', ..., 'vmas']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import marl_ppo.envs.families as families
from marl_ppo.table import Table, resolve

__all__ = ["EnvKind", "ENV_KINDS", "env_kind", "register_env_kind", "kinds_that", "video_refusal"]


def _fact(value: bool | str | Callable[..., bool], cfg) -> bool:
    return value if isinstance(value, bool) else bool(resolve(value)(cfg))


@dataclass(frozen=True)
class EnvKind:
    """One env kind (see the module docstring). ``make`` and ``raw_observations`` are ``"module:function"``
    or the function itself; ``renders`` and ``bounded`` a bool, or a ``"module:function"`` (or function)
    of the env config."""

    name: str
    make: str | Callable[..., Any]
    vectorised: bool = True
    renders: bool | str | Callable[..., bool] = False
    render_kwargs: tuple[tuple[str, Any], ...] = ()
    gives_state: bool = False
    own_time_limit: bool = False
    seeds_in_one_env: bool = True
    bounded: bool | str | Callable[..., bool] = True
    raw_observations: str | Callable[..., Any] | None = None
    takes_factory: bool = False
    reads_image: bool = False
    comm_and_multidiscrete: bool = False
    cpu_only: bool = False
    export_prep: str | None = None
    export_source: str = "the run's env factory (env.factory): each agent's observation as it gives it"
    scenarios: str | Callable[[], Any] | None = None
    team_reward: bool = False
    check: str | Callable[..., None] | None = None

    def check_parameters(self, cfg) -> None:
        """Refuses ``cfg``'s parameters outside the library's ranges (the kind's ``check``), in one line."""
        if self.check is not None:
            resolve(self.check)(cfg)

    def scenario_names(self) -> list[str]:
        """The valid ``env.scenario`` names, as the kind's library lists them (empty: any, or a factory's)."""
        return [] if self.scenarios is None else list(resolve(self.scenarios)())

    def build(self, cfg, *, seed: int, num_envs: int, device=None):
        """The kind's env for ``cfg`` (what ``make_env`` wraps with episode returns and the time limit)."""
        return resolve(self.make)(cfg, seed=seed, num_envs=num_envs, device=device)

    def for_video(self, cfg):
        """``cfg`` (an env config) with the kind's ``render_kwargs`` in its ``kwargs``: the envs an evaluation
        that records a video builds (a PettingZoo game draws frames only with ``render_mode="rgb_array"``)."""
        if not self.render_kwargs:
            return cfg
        return dataclasses.replace(cfg, kwargs={**cfg.kwargs, **dict(self.render_kwargs)})

    def bounds_episodes(self, cfg) -> bool:
        """Whether ``cfg.max_steps`` caps this env's episodes (else it only caps the evaluation's rollout)."""
        return _fact(self.bounded, cfg)

    def draws_frames(self, cfg) -> bool:
        """Whether the envs of ``cfg`` draw video frames."""
        return _fact(self.renders, cfg)

    def raw_observation_specs(self, cfg) -> dict[str, Any] | None:
        """Each group's observation spec as the env gives it before flattening, or ``None`` (as trained on)."""
        return None if self.raw_observations is None else resolve(self.raw_observations)(cfg)


ENV_KINDS: Table[EnvKind] = Table(
    "env kind",
    [
        EnvKind(
            "vmas",
            "marl_ppo.envs.vmas:make_vmas",
            renders=True,
            own_time_limit=True,
            comm_and_multidiscrete=True,
            export_source="vmas.make_env(scenario, ...): reset()/step() give one [num_envs, obs] float32 tensor each",
            scenarios="marl_ppo.envs.vmas:vmas_scenarios",
        ),
        EnvKind(
            "pettingzoo",
            "marl_ppo.envs.pettingzoo:make_pettingzoo",
            vectorised=False,
            # copies stepped in one loop or in a SerialEnv: render(env_index=i) draws copy i, where the family draws
            renders=families.renders,
            render_kwargs=(("render_mode", "rgb_array"),),
            bounded=families.bounds_episodes,  # MPE tasks end at max_cycles; classic games end on their own
            raw_observations="marl_ppo.envs.pettingzoo:raw_observation_specs",
            reads_image=True,
            cpu_only=True,
            export_prep="flatten",  # FlatObservation
            export_source="the game's parallel (or AEC) API: each agent's observation, as reset()/step() give it",
            scenarios="marl_ppo.envs.families:pettingzoo_tasks",
        ),
        EnvKind(
            "mamujoco",
            "marl_ppo.envs.mamujoco:make_mamujoco",
            vectorised=False,
            renders=True,  # offscreen through OpenGL (MUJOCO_GL, EGL by default): envs/mamujoco.py
            render_kwargs=(("render_mode", "rgb_array"),),
            gives_state=True,
            cpu_only=True,
            export_prep="cast",  # the game's float64 observation
            export_source="gymnasium_robotics.mamujoco_v1.parallel_env: each agent's local observation (float64 numpy)",
            scenarios="marl_ppo.envs.mamujoco:scenario_names",
        ),
        # gymnasium tuple-API grids, copies stepped in one loop (envs/gym_grids.py); frames drawn by pyglet, headless
        # through EGL where no DISPLAY is set; a game's observation flattened to one float32 vector per agent
        *(
            EnvKind(
                name,
                make,
                vectorised=False,
                renders=True,
                cpu_only=True,
                export_prep="flatten",
                export_source=f"{package}'s gymnasium env: reset()/step() give each agent's observation vector",
                scenarios=scenarios,
            )
            for name, package, make, scenarios in (
                ("lbf", "lbforaging", "marl_ppo.envs.gym_grids:make_lbf", "marl_ppo.envs.gym_grids:lbf_tasks"),
                ("rware", "rware", "marl_ppo.envs.gym_grids:make_rware", "marl_ppo.envs.gym_grids:rware_tasks"),
            )
        ),
        # the library's MDP stepped for every copy in one loop (envs/overcooked.py); frames by its own sprites
        EnvKind(
            "overcooked",
            "marl_ppo.envs.overcooked:make_overcooked",
            vectorised=False,
            renders=True,
            cpu_only=True,
            export_prep="cast",  # featurize_state's float64 vector (or the lossless grid's int)
            export_source="overcooked's OvercookedGridworld: featurize_state (or the lossless grid, channels first)",
            scenarios="marl_ppo.envs.overcooked:overcooked_layouts",
            team_reward=True,
        ),
        # pyspiel states stepped in one loop (envs/openspiel.py); games end on their own, draw no frames
        EnvKind(
            "openspiel",
            "marl_ppo.envs.openspiel:make_openspiel",
            vectorised=False,
            bounded=False,
            cpu_only=True,
            export_prep="flatten",  # observation_tensor, reshaped by the game, read flat
            export_source="pyspiel: state.observation_tensor(player) (or information_state_tensor)",
            scenarios="marl_ppo.envs.openspiel:openspiel_games",
            team_reward=True,
            check="marl_ppo.envs.game_ranges:check_openspiel",
        ),
        # train.seeds: a factory taking num_envs holds every seed's copies (run/build.py checks the env it made)
        EnvKind(
            "custom",
            "marl_ppo.envs.custom:make_custom",
            gives_state=True,
            takes_factory=True,
        ),
    ],
)


def kinds_that(fact: str) -> list[str]:
    """The names of the kinds whose ``fact`` is set (for messages: ``env.state=true`` needs one of them).

    >>> kinds_that("gives_state")
    ['mamujoco', 'custom']
    """
    return [k.name for k in ENV_KINDS if getattr(k, fact)]


def video_refusal(cfg) -> str | None:
    """Why the envs of ``cfg`` (an env config) cannot record a video, or ``None``."""
    kind = env_kind(cfg.kind)
    if not kind.renders:
        return f"env.kind={cfg.kind!r} does not render (kinds that do: {kinds_that('renders')})"
    if not kind.draws_frames(cfg):
        return f"env.scenario={cfg.scenario!r} draws no frames (env.kind={cfg.kind!r})"
    if cfg.parallel:
        return "env.parallel=true runs the copies in worker processes, which draw no frame here; use env.parallel=false"
    return None


def env_kind(name: str) -> EnvKind:
    """The registered kind ``name``; a ``ValueError`` naming the closest kinds and every registered one for
    any other."""
    return ENV_KINDS.lookup(name)


def register_env_kind(kind: EnvKind) -> EnvKind:
    """Adds ``kind`` to the table (``env.kind=<kind.name>`` then builds it); returns it. A name already
    taken is refused: replace a kind by editing its line, not by shadowing it."""
    return ENV_KINDS.register(kind)
