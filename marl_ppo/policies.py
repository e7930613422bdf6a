"""Policies and critics built from a group's specs, with torchrl's multi-agent modules.

The action spec decides the distribution of each head:

=====================================  ==========================================
action spec (per agent)                 distribution
=====================================  ==========================================
``Bounded`` box                         :class:`~marl_ppo.distributions.StableTanhNormal`
``Unbounded`` box                       torchrl ``IndependentNormal`` (``Independent(Normal, 1)``)
``Categorical`` / ``OneHot``            ``Categorical`` / ``OneHotCategorical`` (masked if the env gives a mask)
``MultiCategorical``                    :class:`~marl_ppo.distributions.MultiCategorical`
``Composite`` of named heads            ``CompositeDistribution``, one log-prob per head
=====================================  ==========================================

>>> from torchrl.envs.libs.vmas import VmasEnv
>>> from marl_ppo.groups import read_group_specs
>>> env = VmasEnv("navigation", num_envs=2, n_agents=2, continuous_actions=True, seed=0)
>>> group = read_group_specs(env)["agents"]
>>> actor, critic = build_actor(group), build_critic(group, centralized=True)
>>> td = critic(actor(env.reset()))
>>> td["agents", "action"].shape, td["agents", "action_log_prob"].shape, td["agents", "state_value"].shape
(torch.Size([2, 2, 2]), torch.Size([2, 2]), torch.Size([2, 2, 1]))
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tensordict.nn import (
    CompositeDistribution,
    InteractionType,
    NormalParamExtractor,
    TensorDictModule,
)
from tensordict.utils import NestedKey
from torch import nn
from torchrl.data import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical as MultiCategoricalSpec,
    MultiOneHot,
    OneHot,
    TensorSpec,
    Unbounded,
)
from torchrl.modules import MultiAgentMLP, ProbabilisticActor
from torchrl.modules.distributions import (
    IndependentNormal,
    MaskedCategorical,
    MaskedOneHotCategorical,
    OneHotCategorical,
)

from marl_ppo.activations import Tanh
from marl_ppo.distributions import MultiCategorical, StableTanhNormal
from marl_ppo.groups import GroupSpec

__all__ = ["Head", "action_heads", "build_actor", "build_critic", "group_network"]

# Tanh: nn.Tanh that stays on ATen's kernel under torch.compile (see marl_ppo.activations)
_ACTIVATIONS = {"tanh": Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}


@dataclass(frozen=True)
class Head:
    """One action head: where its action lives, how many network outputs it needs, its distribution."""

    name: tuple[str, ...]  # path inside the group's action ("" path for a plain action)
    n_params: int
    dist_class: type
    dist_kwargs: dict[str, Any]
    param_names: tuple[str, ...]  # "loc", "scale" or "logits"

    @property
    def key(self) -> NestedKey:
        """The head's key inside the action composite (a string for a top-level head)."""
        return self.name[0] if len(self.name) == 1 else self.name

    @property
    def label(self) -> str:
        return "/".join(self.name) if self.name else "action"


def _leaf_head(name: tuple[str, ...], spec: TensorSpec, masked: bool) -> Head:
    # spec is per agent: shape [n_agents, ...]
    where = f"action head {'/'.join(name) or 'action'}"
    if isinstance(spec, (Bounded,)) and spec.domain == "continuous":
        low, high = spec.space.low[0], spec.space.high[0]
        dim = spec.shape[-1]
        return Head(name, 2 * dim, StableTanhNormal, {"low": low, "high": high}, ("loc", "scale"))
    if isinstance(spec, Unbounded) and spec.domain == "continuous":
        dim = spec.shape[-1]
        return Head(name, 2 * dim, IndependentNormal, {"tanh_loc": False}, ("loc", "scale"))
    # MultiCategorical/MultiOneHot subclass Categorical/OneHot: test them first
    if isinstance(spec, (MultiCategoricalSpec, MultiOneHot)):
        if masked:
            raise NotImplementedError(f"{where}: action masks on multi-discrete actions are not supported")
        if isinstance(spec, MultiOneHot):
            raise NotImplementedError(
                f"{where}: MultiOneHot actions are not supported; ask the env for categorical indices "
                "(VMAS: multidiscrete_actions=True, categorical_actions=True)"
            )
        nvec = [int(n) for n in spec.nvec.reshape(-1, spec.nvec.shape[-1])[0]]
        return Head(name, sum(nvec), MultiCategorical, {"nvec": nvec}, ("logits",))
    if isinstance(spec, OneHot):
        cls = MaskedOneHotCategorical if masked else OneHotCategorical
        return Head(name, spec.shape[-1], cls, {}, ("logits",))
    if isinstance(spec, Categorical):
        if masked:
            return Head(name, spec.space.n, MaskedCategorical, {}, ("logits",))
        return Head(name, spec.space.n, torch.distributions.Categorical, {}, ("logits",))
    if isinstance(spec, Binary):
        raise NotImplementedError(f"{where}: Binary action specs are not supported yet")
    raise NotImplementedError(f"{where}: no policy head for action spec {type(spec).__name__}")


def action_heads(group: GroupSpec) -> list[Head]:
    """The group's action heads, in spec order (one head for a plain tensor action)."""
    spec = group.agent_action_spec
    masked = group.action_mask_key is not None
    if not isinstance(spec, Composite):
        return [_leaf_head((), spec, masked)]
    if masked:
        # a mask the policy cannot apply would let it sample illegal actions: refuse, don't ignore it
        raise NotImplementedError(
            f"group {group.name!r}: the env gives an action mask {group.action_mask_key} but the action is a "
            f"composite of heads {list(spec.keys(True, True))}; action masks work on one categorical action"
        )
    heads = []
    for key in spec.keys(include_nested=True, leaves_only=True):
        key = (key,) if isinstance(key, str) else tuple(key)
        heads.append(_leaf_head(key, spec[key], masked=False))
    return heads


class SharedAgentMLP(nn.Module):
    """One MLP shared by every agent of a group: ``[*B, n_agents, obs] -> [*B, n_agents, n_out]``.

    The same maths as torchrl's ``MultiAgentMLP(share_params=True)`` (same layers, same default
    initialisation), written as a plain ``nn.Sequential``: ``MultiAgentMLP`` swaps its parameters
    into an empty network on every call, about 0.5 ms per minibatch on CPU, which is on the hot path
    of the update. ``centralized=True`` reads all the group's observations and gives every agent
    the same output.

    >>> import torch
    >>> net = SharedAgentMLP(4, 2, n_agents=3, centralized=False, hidden=(8,), activation_class=torch.nn.Tanh)
    >>> net(torch.zeros(5, 3, 4)).shape
    torch.Size([5, 3, 2])
    >>> critic = SharedAgentMLP(4, 1, n_agents=3, centralized=True, hidden=(8,), activation_class=torch.nn.Tanh)
    >>> v = critic(torch.randn(5, 3, 4)); v.shape, bool((v == v[:, :1]).all())
    (torch.Size([5, 3, 1]), True)
    """

    def __init__(self, n_agent_inputs: int, n_agent_outputs: int, n_agents: int, *, centralized: bool,
                 hidden: Sequence[int], activation_class: type[nn.Module], device=None) -> None:
        super().__init__()
        self.n_agents, self.centralized = n_agents, centralized
        layers, last = [], n_agent_inputs * (n_agents if centralized else 1)
        for width in hidden:
            layers += [nn.Linear(last, width, device=device), activation_class()]
            last = width
        self.net = nn.Sequential(*layers, nn.Linear(last, n_agent_outputs, device=device))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.shape[-2] != self.n_agents:
            raise ValueError(f"expected observations [*B, {self.n_agents}, obs_dim], got {list(obs.shape)}")
        if not self.centralized:
            return self.net(obs)
        out = self.net(obs.flatten(-2, -1)).unsqueeze(-2)
        return out.expand(*out.shape[:-2], self.n_agents, out.shape[-1])


class TensorOutModule(TensorDictModule):
    """A ``TensorDictModule`` for networks that return plain tensors: writes them straight in.

    tensordict 0.14 passes every module output through ``TensorDict.from_any``, which probes
    ``importlib.util.find_spec("pandas")`` on each call when pandas is not installed (about 40 µs,
    three calls per group per minibatch). Anything other than a tensor output takes the usual path.
    """

    def _write_to_tensordict(self, tensordict, tensors, tensordict_out=None, out_keys=None):
        out_keys = self.out_keys_source if out_keys is None else out_keys
        if (tensordict_out is not None or self.inplace is not True or len(tensors) != len(out_keys)
                or not all(type(t) is torch.Tensor or isinstance(t, nn.Parameter) for t in tensors)):
            return super()._write_to_tensordict(tensordict, tensors, tensordict_out, out_keys)
        for key, tensor in zip(out_keys, tensors):
            if key != "_":
                tensordict.set(key, tensor)
        return tensordict


def _mlp(
    group: GroupSpec, n_out: int, *, centralized: bool, share_params: bool,
    hidden: Sequence[int], activation: str, device: torch.device | str | None,
) -> nn.Module:
    if activation not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; known: {sorted(_ACTIVATIONS)}")
    obs_dim = _obs_dim(group)
    if share_params:
        return SharedAgentMLP(obs_dim, n_out, group.n_agents, centralized=centralized, hidden=hidden,
                              activation_class=_ACTIVATIONS[activation], device=device)
    return MultiAgentMLP(
        n_agent_inputs=obs_dim,
        n_agent_outputs=n_out,
        n_agents=group.n_agents,
        centralized=centralized,
        share_params=False,
        depth=len(hidden),
        num_cells=list(hidden),
        activation_class=_ACTIVATIONS[activation],
        device=device,
    )


def _obs_dim(group: GroupSpec) -> int:
    if len(group.observation_keys) != 1:
        raise NotImplementedError(
            f"group {group.name!r} has several observation entries {group.observation_keys}; "
            "policies read one flat observation per agent"
        )
    if group.observation_shape is None or len(group.observation_shape) != 2:
        raise ValueError(
            f"group {group.name!r}: observation shape {group.observation_shape} is not [n_agents, obs_dim]"
        )
    return group.observation_shape[-1]


def build_actor(
    group: GroupSpec,
    *,
    share_params: bool = True,
    hidden: Sequence[int] = (256, 256),
    activation: str = "tanh",
    device: torch.device | str | None = None,
    net: nn.Module | None = None,
) -> ProbabilisticActor:
    """A decentralised policy for ``group``: one MLP over each agent's observation, heads from its action spec.

    Writes ``(group, "action")`` and its log-prob: ``(group, "action_log_prob")`` for a plain action,
    one ``<head>_log_prob`` entry beside each head for a composite action.

    The policy samples its actions unless told otherwise (``set_exploration_type(DETERMINISTIC)``
    gives the mode): torchrl's default outside a collector would be the mode, and PPO trained on
    rollouts of the mode silently stops exploring.

    ``net`` replaces the MLP (``[*B, n_agents, obs_dim] -> [*B, n_agents, n_params]``); the
    network arguments are then unused.
    """
    heads = action_heads(group)
    g = group.name
    n_out = sum(h.n_params for h in heads)
    if net is None:
        net = _mlp(group, n_out, centralized=False, share_params=share_params,
                   hidden=hidden, activation=activation, device=device)
    obs_key = group.observation_keys[0]
    if not group.is_composite_action:
        head = heads[0]
        if head.param_names == ("loc", "scale"):
            module = TensorOutModule(
                nn.Sequential(net, NormalParamExtractor()), in_keys=[obs_key],
                out_keys=[(g, "loc"), (g, "scale")],
            )
            in_keys = {"loc": (g, "loc"), "scale": (g, "scale")}
        else:
            module = TensorOutModule(net, in_keys=[obs_key], out_keys=[(g, "logits")])
            in_keys = {"logits": (g, "logits")}
            if group.action_mask_key is not None:
                in_keys["mask"] = group.action_mask_key
        actor = ProbabilisticActor(
            module,
            in_keys=in_keys,
            out_keys=[group.keys.action],
            distribution_class=head.dist_class,
            distribution_kwargs=head.dist_kwargs,
            return_log_prob=True,
            log_prob_key=group.keys.log_prob,
            default_interaction_type=InteractionType.RANDOM,
        )
    else:
        actor = _composite_actor(group, heads, net, obs_key)
    return _stamp(actor, net)


class _SplitHeads(nn.Module):
    """Splits the MLP output into each head's distribution parameters (loc/scale or logits)."""

    def __init__(self, heads: list[Head]) -> None:
        super().__init__()
        self.sizes = [h.n_params for h in heads]
        self.kinds = [h.param_names for h in heads]
        self.normal = NormalParamExtractor()

    def forward(self, out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        params: list[torch.Tensor] = []
        for chunk, kind in zip(out.split(self.sizes, dim=-1), self.kinds):
            if kind == ("loc", "scale"):
                params.extend(self.normal(chunk))
            else:
                params.append(chunk)
        return tuple(params)


def _composite_actor(group: GroupSpec, heads: list[Head], net: nn.Module, obs_key: NestedKey) -> ProbabilisticActor:
    g = group.name
    params_key = (g, "params")
    out_keys = [params_key + h.name + (p,) for h in heads for p in h.param_names]
    module = TensorOutModule(nn.Sequential(net, _SplitHeads(heads)), in_keys=[obs_key], out_keys=out_keys)
    return ProbabilisticActor(
        module,
        in_keys={"params": params_key},
        out_keys=[group.keys.action + h.name for h in heads],
        distribution_class=CompositeDistribution,
        distribution_kwargs={
            "distribution_map": {h.key: h.dist_class for h in heads},
            "name_map": {h.key: group.keys.action + h.name for h in heads},
            "extra_kwargs": {h.key: h.dist_kwargs for h in heads if h.dist_kwargs},
        },
        return_log_prob=True,
        default_interaction_type=InteractionType.RANDOM,
    )


def build_critic(
    group: GroupSpec,
    *,
    centralized: bool = True,
    share_params: bool = True,
    hidden: Sequence[int] = (256, 256),
    activation: str = "tanh",
    device: torch.device | str | None = None,
    net: nn.Module | None = None,
) -> TensorDictModule:
    """A value network writing ``(group, "state_value")`` ``[*B, n_agents, 1]``.

    ``centralized=True`` is MAPPO's critic (each agent's value sees all the group's observations);
    ``False`` is IPPO's (each agent's value sees its own). ``net`` replaces the MLP.
    """
    if net is None:
        net = _mlp(group, 1, centralized=centralized, share_params=share_params,
                   hidden=hidden, activation=activation, device=device)
    critic = TensorOutModule(net, in_keys=[group.observation_keys[0]], out_keys=[group.keys.value])
    return _stamp(critic, net)


def _stamp(module: nn.Module, net: nn.Module) -> nn.Module:
    # Written past nn.Module.__setattr__: a plain attribute, not a second registration of `net`
    # (the state_dict keeps one entry per parameter).
    object.__setattr__(module, "_group_network", net)
    return module


def group_network(module: nn.Module) -> nn.Module | None:
    """The agent MLP of an actor or critic built by :func:`build_actor` / :func:`build_critic`
    around one of our MLPs; ``None`` for any other module (the router then never bundles its
    group: a bundle rebuilds the group's actor from its spec around this network)."""
    net = module.__dict__.get("_group_network")
    return net if isinstance(net, (SharedAgentMLP, MultiAgentMLP)) else None
