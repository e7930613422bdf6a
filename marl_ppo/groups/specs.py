"""Group specs: what one agent group looks like, read from a torchrl multi-agent env.

A group is the unit that gets its own PPO loss. Its spec lists its agents, the keys it
observes and acts on, the raw reward/done keys the env writes for it, and the keys its
loss reads and writes. Those loss keys always live under the group's own sub-tensordict,
never at the root, so two groups' losses cannot overwrite each other's advantages.

>>> from torchrl.envs.libs.vmas import VmasEnv
>>> env = VmasEnv("simple_tag", num_envs=2, continuous_actions=True, seed=0)
>>> specs = read_group_specs(env)
>>> list(specs), specs["adversary"].n_agents, specs["agent"].n_agents
(['adversary', 'agent'], 3, 1)
>>> specs["adversary"].keys.advantage
('adversary', 'advantage')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from tensordict.utils import NestedKey
from torchrl.data import Composite, OneHot, TensorSpec, Unbounded
from torchrl.envs import EnvBase, ParallelEnv, TransformedEnv

__all__ = [
    "GroupKeys",
    "GroupSpec",
    "GroupSpecError",
    "group_map",
    "inputs_spec",
    "read_group_specs",
    "seat_difference",
]


class GroupSpecError(ValueError):
    """An env whose specs do not describe agent groups in torchrl's multi-agent layout."""


@dataclass(frozen=True)
class GroupKeys:
    """The keys one group's loss reads and writes, all namespaced under the group.

    Reward/done keys are relative to ``"next"`` (as torchrl's losses expect). :attr:`NAMES` holds
    every entry name the package writes under a group: no other module spells them.
    """

    group: str
    action: NestedKey
    log_prob: NestedKey
    value: NestedKey
    advantage: NestedKey
    value_target: NestedKey
    reward: NestedKey
    done: NestedKey
    terminated: NestedKey
    episode_reward: NestedKey
    update_weight: NestedKey
    update_mask: NestedKey
    mask: NestedKey | None = None

    # field -> the entry's name under the group's key
    NAMES: ClassVar[dict[str, str]] = {
        "action": "action",
        "log_prob": "action_log_prob",
        "value": "state_value",
        "advantage": "advantage",
        "value_target": "value_target",
        "reward": "train_reward",
        "done": "train_done",
        "terminated": "train_terminated",
        "episode_reward": "episode_reward",
        "update_weight": "update_weight",
        "update_mask": "update_mask",
    }

    @classmethod
    def for_group(cls, group: str, mask: NestedKey | None = None) -> "GroupKeys":
        return cls(group=group, **{name: (group, entry) for name, entry in cls.NAMES.items()}, mask=mask)

    def value_keys(self) -> dict[str, NestedKey]:
        """What torchrl's PPO losses and value estimators take through ``set_keys``: value, advantage,
        value target, and the training reward, done and terminated."""
        return {
            "value": self.value,
            "advantage": self.advantage,
            "value_target": self.value_target,
            "reward": self.reward,
            "done": self.done,
            "terminated": self.terminated,
        }


# Entries under a group's observation spec that are not inputs to the policy.
_NON_INPUT_OBS = frozenset({"info", "mask", "action_mask", GroupKeys.NAMES["episode_reward"]})


@dataclass(frozen=True)
class GroupSpec:
    """One agent group as the env describes it.

    Attributes:
        name: the group's key in the env's tensordicts.
        agents: agent names, in the order of the agent dimension.
        observation_keys: policy/critic inputs, e.g. ``(("agents", "observation"),)``.
        action_spec: the group's action spec (tensor or composite), env batch dims included.
        env_batch_ndim: how many leading env batch dims the specs carry (VMAS: 1, PettingZoo: 0).
        raw_reward_key: the env's own reward for the group, e.g. ``("agents", "reward")``.
        raw_done_key: the env's own per-agent done for the group, if it has one.
        raw_terminated_key: the env's own per-agent terminated for the group, if it has one.
        action_mask_key: legal-action mask the policy must respect, if the env gives one.
        observation_shape: per-step shape of the first observation entry, ``[n_agents, obs_dim]``.
        observation_spec: the observation entries' per-step specs (see :attr:`inputs`).
        state_spec: the env's global state (its root entry ``state``), per step, if it gives one:
            what a critic of ``model.critic_inputs=state`` reads; the policies never do.
        keys: the namespaced keys the group's loss reads and writes.
    """

    name: str
    agents: tuple[str, ...]
    observation_keys: tuple[NestedKey, ...]
    action_spec: TensorSpec
    env_batch_ndim: int
    raw_reward_key: NestedKey | None
    raw_done_key: NestedKey | None = None
    raw_terminated_key: NestedKey | None = None
    action_mask_key: NestedKey | None = None
    observation_shape: tuple[int, ...] | None = None
    observation_spec: Composite | None = field(default=None, compare=False, repr=False)
    state_spec: TensorSpec | None = field(default=None, compare=False, repr=False)
    keys: GroupKeys = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.keys is None:
            object.__setattr__(self, "keys", GroupKeys.for_group(self.name))

    @property
    def n_agents(self) -> int:
        return len(self.agents)

    @property
    def inputs(self) -> Composite:
        """What a model reads: each observation entry at its full key, per-step shape ``[n_agents, ...]``
        (``[n_agents, obs_dim]`` vectors, ``[n_agents, C, H, W]`` images, ``[n_agents, N, F]`` sets).

        A spec written by hand with only :attr:`observation_shape` reads as one float entry of that shape.
        """
        if self.observation_spec is not None:
            return self.observation_spec
        if self.observation_shape is None:
            raise ValueError(f"group {self.name!r} has neither observation_spec nor observation_shape")
        return inputs_spec({self.observation_keys[0]: Unbounded(shape=self.observation_shape)}, self.n_agents)

    @property
    def agent_action_spec(self) -> TensorSpec:
        """The action spec of one step of the group, without env batch dims: ``[n_agents, ...]``."""
        spec = self.action_spec
        for _ in range(self.env_batch_ndim):
            spec = spec[0]
        return spec

    @property
    def is_composite_action(self) -> bool:
        return isinstance(self.action_spec, Composite)


def inputs_spec(entries: dict, n_agents: int) -> Composite:
    """A Composite of per-step ``entries`` at their full keys (each group's node shaped ``[n_agents]``)."""
    spec = Composite()
    for key, leaf in entries.items():
        if key[0] not in spec.keys():
            spec[key[0]] = Composite(shape=(n_agents,), device=leaf.device)
        spec[key] = leaf
    return spec


def seat_difference(a: GroupSpec, b: GroupSpec) -> str | None:
    """Why one group's policy cannot play the other's seat (``None``: it can): agents, observation,
    action spec and legal-action mask must match."""
    for what, x, y in (
        ("agents", a.n_agents, b.n_agents),
        ("observation shape", a.observation_shape, b.observation_shape),
        ("action spec", a.agent_action_spec, b.agent_action_spec),
        ("action mask", a.action_mask_key is not None, b.action_mask_key is not None),
    ):
        if x != y:
            return f"{what} {x} (group {a.name!r}) != {y} (group {b.name!r})"
    return None


def group_map(env: EnvBase) -> dict[str, list[str]]:
    """The env's ``{group: [agents]}``; batched envs (``SerialEnv``/``ParallelEnv``) report one per copy."""
    base = env.base_env if isinstance(env, TransformedEnv) else env
    if isinstance(base, ParallelEnv):
        # A ParallelEnv forwards attribute reads to its workers as remote calls, which a dict
        # attribute does not survive: read the map from one copy built in this process.
        probe = base.create_env_fn[0](**base.create_env_kwargs[0])
        try:
            return group_map(probe)
        finally:
            probe.close()
    gm = getattr(env, "group_map", None)
    if isinstance(gm, (list, tuple)):
        gm = gm[0] if gm else None
    if not gm:
        raise GroupSpecError(
            f"{type(env).__name__} has no group_map: marl_ppo needs a multi-agent env in "
            "torchrl's layout (VmasEnv, PettingZooWrapper, or an EnvBase with a group_map)."
        )
    return {g: list(agents) for g, agents in gm.items()}


def read_group_specs(env: EnvBase) -> dict[str, GroupSpec]:
    """Reads one :class:`GroupSpec` per agent group from a torchrl multi-agent env.

    Works with any env that has a ``group_map`` and torchrl's multi-agent layout
    (``VmasEnv``, ``PettingZooWrapper``, a custom ``EnvBase``).
    """
    groups = group_map(env)
    obs_spec = env.full_observation_spec
    act_spec = env.full_action_spec
    rew_spec = env.full_reward_spec
    done_spec = env.full_done_spec
    batch_ndim = len(env.batch_size)
    specs: dict[str, GroupSpec] = {}
    state = obs_spec["state"] if "state" in obs_spec.keys() and "state" not in groups else None
    for group, agents in groups.items():
        if group not in obs_spec.keys():
            raise GroupSpecError(
                f"group {group!r} has no observation entry in the env's observation spec; "
                f"the spec has {sorted(map(str, obs_spec.keys()))}"
            )
        group_obs = obs_spec[group]
        if tuple(group_obs.shape[batch_ndim:]) != (len(agents),):
            raise GroupSpecError(
                f"group {group!r} ({len(agents)} agents): its observation spec has shape {list(group_obs.shape)}; "
                f"a group's entries carry the agent dim after the env's batch dims: "
                f"Composite(..., shape=(*batch, n_agents)) = {[*env.batch_size, len(agents)]}"
            )
        obs_keys = tuple((group, k) for k in group_obs.keys() if k not in _NON_INPUT_OBS)
        if not obs_keys:
            raise GroupSpecError(f"group {group!r} has no observation to feed a policy")
        action_key = (group, "action")
        if action_key not in act_spec.keys(include_nested=True):
            raise GroupSpecError(
                f"group {group!r} has no action at {action_key}; action keys are {list(act_spec.keys(True, True))}"
            )
        mask_key = (group, "action_mask") if "action_mask" in group_obs.keys() else None
        if mask_key is not None:
            _check_action_mask(group, obs_spec[mask_key], act_spec[action_key])
        reward_key = (group, "reward") if (group, "reward") in rew_spec.keys(True) else None
        done_keys = done_spec.keys(True)
        specs[group] = GroupSpec(
            name=group,
            agents=tuple(agents),
            observation_keys=obs_keys,
            action_spec=act_spec[action_key],
            env_batch_ndim=batch_ndim,
            raw_reward_key=reward_key,
            raw_done_key=(group, "done") if (group, "done") in done_keys else None,
            raw_terminated_key=(group, "terminated") if (group, "terminated") in done_keys else None,
            action_mask_key=mask_key,
            observation_shape=tuple(obs_spec[obs_keys[0]].shape[batch_ndim:]),
            observation_spec=inputs_spec({k: _step_spec(obs_spec[k], batch_ndim) for k in obs_keys}, len(agents)),
            state_spec=None if state is None else _step_spec(state, batch_ndim),
            keys=GroupKeys.for_group(group, mask=(group, "mask") if "mask" in group_obs.keys() else None),
        )
    return specs


def _step_spec(spec: TensorSpec, batch_ndim: int) -> TensorSpec:
    """``spec`` of one step: without the env's batch dims."""
    for _ in range(batch_ndim):
        spec = spec[0]
    return spec


def _check_action_mask(group: str, mask_spec: TensorSpec, action_spec: TensorSpec) -> None:
    """A legal-action mask must be boolean with one entry per choice of the group's action."""
    n_choices = (
        action_spec.shape[-1]
        if isinstance(action_spec, OneHot)
        else getattr(getattr(action_spec, "space", None), "n", None)
    )
    if isinstance(action_spec, Composite) or not isinstance(n_choices, int):
        return  # composite or multi-discrete: refused by the policy builder, which says why
    if mask_spec.dtype != torch.bool or mask_spec.shape[-1] != n_choices:
        raise GroupSpecError(
            f"group {group!r}: action mask ({group}, 'action_mask') of shape {list(mask_spec.shape)} and dtype "
            f"{mask_spec.dtype} does not match its action ({type(action_spec).__name__} of shape "
            f"{list(action_spec.shape)}): expected a bool mask with one entry per choice"
        )
