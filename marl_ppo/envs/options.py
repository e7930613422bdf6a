"""The env layer's options: which environment, how many copies, how episodes end.

:class:`EnvConfig` is the ``env`` section of a run's :class:`~marl_ppo.config.Config`, and what
:func:`~marl_ppo.envs.make_env` takes: the env adapters read nothing else of the run's config.

>>> EnvConfig(scenario="navigation", num_envs=4).bounds_episodes
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from marl_ppo.envs.kinds import ENV_KINDS, env_kind, kinds_that
from marl_ppo.options import ConfigError, at_least, choice

__all__ = ["EnvConfig", "ImageOptions"]


@dataclass
class ImageOptions:
    """What a PettingZoo env copy does with its image observations before a batch stores them (``env.image``).

    An image is an observation of three sides per agent, ``[H, W, C]`` as PettingZoo gives it
    (pistonball: ``uint8`` ``[457, 120, 3]``; MAgent2's view: ``float32`` ``[13, 13, 5]``). The
    ``cnn`` model kind reads it; every other kind reads flat vectors.

    Attributes:
        observation: ``auto`` keeps ``uint8`` images as images and flattens every other array
            (a board, MAgent2's view: ``[13, 13, 5]`` becomes 845 floats); ``image`` keeps every
            three-sided observation as an image (MAgent2 for ``model.kind=cnn``); ``flat``
            flattens them all.
        size: ``[H, W]`` to resize each image to (bilinear, antialiased), or ``None``.
        grayscale: an RGB image becomes one channel (ITU-R 601 luma).
        frames: the last ``frames`` images stacked along the channels (the first one repeated
            after a reset); ``1`` stacks nothing.
        check_changes: the run stops, naming the group, when a group's image observation is the same before
            and after every step of the first collected batch (a game that draws its observation only when it
            renders, built without a render mode); ``false`` skips the check, for images that stay still.

    A ``uint8`` image stays ``uint8`` through all of these (rounded after a resize): the batch
    stores a quarter of float32's bytes, and the model scales it to [0, 1].
    """

    observation: str = "auto"
    size: Optional[list[int]] = None
    grayscale: bool = False
    frames: int = 1
    check_changes: bool = True

    def __post_init__(self) -> None:
        choice("env.image.observation", self.observation, ("auto", "image", "flat"))
        at_least("env.image.frames", self.frames, 1)
        if self.size is not None:
            size = list(self.size)
            if len(size) != 2 or not all(isinstance(v, int) and v >= 1 for v in size):
                raise ConfigError(f"env.image.size must be [height, width] of positive integers, got {size!r}")
            self.size = size

    @property
    def changes_images(self) -> bool:
        """Whether an image is resized, grayed or stacked."""
        return self.size is not None or self.grayscale or self.frames > 1


@dataclass
class EnvConfig:
    """Which environment to train in.

    Attributes:
        kind: ``vmas``, ``pettingzoo`` (MPE tasks from ``mpe2``, classic games, or any PettingZoo env
            by import path) or ``custom`` (your own env, from ``env.factory``).
        scenario: VMAS scenario name (``navigation``), PettingZoo MPE task (``simple_spread_v3``),
            classic game (``tictactoe_v3``) or the import path of a PettingZoo env module
            (``pettingzoo.sisl.pursuit_v5``). Unused by ``custom``.
        factory: ``custom`` only: the callable that returns the env, ``package.module:callable``
            or ``path/to/file.py:callable``; it gets ``env.kwargs`` and those of ``num_envs``,
            ``device``, ``seed`` and ``max_steps`` its signature names.
        num_envs: VMAS vectorized envs in one process; PettingZoo env copies.
        parallel: PettingZoo only: run the env copies in worker processes (torchrl ``ParallelEnv``)
            instead of one after another in this process (``SerialEnv``, or for a turn-based game
            :class:`~marl_ppo.envs.aec_games.AecGames`, faster); same seeds, same data.
        max_steps: episode length cap (VMAS ``max_steps``, PettingZoo MPE ``max_cycles``; classic
            games end on their own: there it is only the evaluation rollout's length).
        time_limit: an episode cut at ``max_steps``: ``truncate`` marks it ``truncated``
            (``terminated`` stays ``False``, GAE bootstraps from the critic's value of the last
            observation); ``terminate`` marks it ``terminated`` (no bootstrap: VMAS's own
            ``max_steps``, as before and as BenchMARL). The env's own endings are ``terminated``
            under both; a custom factory keeps its flags, ``terminate`` folding its ``truncated``
            into ``terminated``.
        continuous_actions: continuous (box) or discrete actions.
        multidiscrete_actions: VMAS discrete actions as one categorical per dimension.
        comm: VMAS comm adapter: expose communicating groups' action as ``{move, comm}``.
        device: where VMAS simulates (``cpu`` or ``cuda``); PettingZoo always steps on CPU.
        image: PettingZoo only: image observations kept, resized, grayed, stacked
            (:class:`ImageOptions`).
        state: the env's global state as the root entry ``state`` of every step (MaMuJoCo: the
            robot's full position and velocity; a custom env gives its own), for a critic that reads
            it (``model.critic_inputs``); the policies never see it.
        kwargs: scenario (or factory) keyword arguments (e.g. ``n_agents: 3``). They belong to the
            scenario: a file or override that changes ``env.kind``, ``env.scenario`` or
            ``env.factory`` without giving ``env.kwargs`` starts from none (the env's own defaults).
    """

    kind: str = "vmas"
    scenario: str = "navigation"
    factory: Optional[str] = None
    num_envs: int = 60
    parallel: bool = False
    max_steps: int = 100
    time_limit: str = "truncate"
    continuous_actions: bool = True
    multidiscrete_actions: bool = False
    comm: bool = False
    device: str = "cpu"
    image: ImageOptions = field(default_factory=ImageOptions)
    state: bool = False
    kwargs: dict[str, Any] = field(default_factory=lambda: {"n_agents": 3})

    @property
    def bounds_episodes(self) -> bool:
        """Whether ``max_steps`` is the episodes' length cap (VMAS, PettingZoo MPE ``max_cycles``);
        classic games end on their own and use it only as the evaluation rollout's length."""
        return env_kind(self.kind).bounds_episodes(self)

    @property
    def task_name(self) -> str:
        """The task's short name, for a run's default name: the scenario's (an import path or registry id:
        its last part), or a custom factory's."""
        if env_kind(self.kind).takes_factory:
            return (self.factory or self.kind).rpartition(":")[2].rpartition(".")[2]
        return self.scenario.rpartition(".")[2].rpartition("/")[2]

    def __post_init__(self) -> None:
        choice("env.kind", self.kind, tuple(ENV_KINDS.names()))
        kind = env_kind(self.kind)
        glued = [k for k, v in self.kwargs.items() if v is None and ":" in str(k)]
        if glued:  # YAML reads {horizon:10} as the key "horizon:10" with no value
            key = glued[0]
            name, _, value = str(key).partition(":")
            raise ConfigError(
                f"env.kwargs has the key {key!r} with no value: YAML needs a space after the colon "
                f"({{{name}: {value}}}, not {{{key}}})"
            )
        if self.factory is not None and not kind.takes_factory:
            raise ConfigError(
                f"env.factory is set ({self.factory!r}) but env.kind is {self.kind!r}; set env.kind="
                + " or env.kind=".join(kinds_that("takes_factory"))
            )
        if self.state and not kind.gives_state:
            kinds = kinds_that("gives_state")
            raise ConfigError(f"env.state=true: env.kind={self.kind!r} gives no global state (kinds that do: {kinds})")
        if not kind.reads_image and self.image != ImageOptions():
            raise ConfigError(
                "env.image is read by env.kind="
                + " or env.kind=".join(kinds_that("reads_image"))
                + f" (its image observations); env.kind is {self.kind!r}"
            )
        at_least("env.num_envs", self.num_envs, 1)
        at_least("env.max_steps", self.max_steps, 1)
        choice("env.time_limit", self.time_limit, ("truncate", "terminate"))
        if kind.comm_and_multidiscrete:
            if self.multidiscrete_actions and self.continuous_actions:
                raise ConfigError(
                    "env.multidiscrete_actions=true needs discrete actions, but env.continuous_actions=true; "
                    "set env.continuous_actions=false or env.multidiscrete_actions=false"
                )
        else:
            options = {"env.comm": self.comm, "env.multidiscrete_actions": self.multidiscrete_actions}
            for name, value in options.items():
                if value:
                    where = " or env.kind=".join(kinds_that("comm_and_multidiscrete"))
                    raise ConfigError(
                        f"{name}=true is a VMAS option, read by env.kind={where}; env.kind is {self.kind!r}"
                    )
        kind.check_parameters(self)
        if kind.cpu_only and self.device != "cpu":
            raise ConfigError(f"env.device={self.device!r}: {self.kind} envs step on the CPU only; use env.device=cpu")
