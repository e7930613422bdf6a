"""Value networks: per group (MAPPO's centralised or IPPO's decentralised critic) or one global
critic over every group (torchrl's ``CrossGroupCritic``), optionally on normalised values.

>>> from torchrl.envs.libs.vmas import VmasEnv
>>> from marl_ppo.groups.specs import read_group_specs
>>> env = VmasEnv("navigation", num_envs=2, n_agents=2, continuous_actions=True, seed=0)
>>> group = read_group_specs(env)["agents"]
>>> build_critic(group, centralized=True)(env.reset())["agents", "state_value"].shape
torch.Size([2, 2, 1])

Value normalisation (MAPPO, Yu et al. 2022): the network learns normalised targets
``(G - mean) / std``; :class:`NormalizedValueNet` writes its values de-normalised, so GAE, the
logged values and everything else see values in reward units. The router updates each group's
statistics once per collected batch (:func:`update_value_norm`) and the loss compares normalised
targets and predictions (:mod:`marl_ppo.core.losses`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.modules import MultiAgentMLP, PopArtValueNorm, RunningValueNorm, ValueNorm
from torchrl.modules.models.cross_group_critic import CrossCriticGroupSpec, CrossGroupCritic

from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.chain import trunk_of
from marl_ppo.models.inputs import flat_inputs
from marl_ppo.models.mlp import ACTIVATIONS, SharedAgentMLP, agent_mlp, observation_dim
from marl_ppo.models.modules import Networks, TensorOutModule
from marl_ppo.models.registry import Trunk
from marl_ppo.options import ConfigError

__all__ = [
    "build_critic",
    "build_global_critic",
    "check_every_group_acts",
    "NormalizedValueNet",
    "SlicedValueNorm",
    "make_value_norm",
    "value_norms",
    "update_value_norm",
    "output_layer",
]


def build_critic(
    group: GroupSpec,
    *,
    centralized: bool = True,
    share_params: bool = True,
    hidden: Sequence[int] = (256, 256),
    activation: str = "tanh",
    device: torch.device | str | None = None,
    net: nn.Module | None = None,
    value_norm: str = "none",
    popart_beta: float = 0.95,
    kind: str | Sequence[str] = "mlp",
    options: Mapping[str, Mapping[str, Any]] | None = None,
    networks: Networks | None = None,
    agent_id: bool = False,
) -> TensorDictModule:
    """A value network writing ``(group, "state_value")`` ``[*B, n_agents, 1]``.

    ``centralized=True`` is MAPPO's critic (each agent's value sees all the group's observations);
    ``False`` is IPPO's (each agent's value sees its own). ``net`` replaces the MLP; ``networks``
    records which MLP the critic runs (:class:`~marl_ppo.models.modules.Networks`).
    ``value_norm`` (``none``, ``running``, ``popart``) makes the network learn normalised values.
    ``kind`` names a registered model kind or a chain of them, ``options`` each kind's own (by kind): a
    kind with a trunk (``gru``/``lstm``: the MLP feeds a recurrent cell) reports its width, and a linear
    value layer reads it.
    """
    trunk = trunk_of(
        group, kind, role="critic", centralized=centralized, share_params=share_params, hidden=hidden,
        activation=activation, device=device, options=options or {},
    )  # fmt: skip
    if trunk is not None:
        return _critic_on(group, trunk, share_params, activation, device, value_norm, popart_beta, agent_id)
    concat, obs_key, width = (None, group.observation_keys[0], None) if net is not None else flat_inputs(group)
    if net is None:
        net = agent_mlp(
            group,
            1,
            centralized=centralized,
            share_params=share_params,
            hidden=hidden,
            activation=activation,
            device=device,
            n_inputs=width,
            agent_id=agent_id,
        )
    if value_norm == "none":
        critic = TensorOutModule(net, in_keys=[obs_key], out_keys=[group.keys.value])
    else:
        norm = make_value_norm(value_norm, popart_beta, device)
        wrapped = NormalizedValueNet(
            net, {group.name: norm}, {group.name: output_layer(net)} if value_norm == "popart" else {}
        )
        critic = TensorOutModule(wrapped, in_keys=[obs_key], out_keys=[group.keys.value])
    if concat is not None:
        return TensorDictSequential(concat, critic)
    # a bundle runs the bare network, with the groups' normalisers
    return critic if networks is None else networks.record(critic, net)


def _critic_on(
    group: GroupSpec,
    trunk: Trunk,
    share_params: bool,
    activation: str,
    device,
    value_norm: str,
    popart_beta: float,
    agent_id: bool = False,
) -> TensorDictModule:
    """A linear value layer per agent on the ``trunk``'s output (normalised values if asked)."""
    module, features, width = trunk
    head = agent_mlp(
        group,
        1,
        centralized=False,
        share_params=share_params,
        hidden=(),
        activation=activation,
        device=device,
        n_inputs=width,
        agent_id=agent_id,
    )
    if value_norm != "none":
        layers = {group.name: output_layer(head)} if value_norm == "popart" else {}
        head = NormalizedValueNet(head, {group.name: make_value_norm(value_norm, popart_beta, device)}, layers)
    return TensorDictSequential(module, TensorOutModule(head, in_keys=[features], out_keys=[group.keys.value]))


def build_global_critic(
    groups: Mapping[str, GroupSpec],
    *,
    hidden: Sequence[int] = (256, 256),
    activation: str = "tanh",
    d_model: int = 64,
    device: torch.device | str | None = None,
    value_norm: str = "none",
    popart_beta: float = 0.95,
) -> TensorDictModule:
    """One critic for every group: torchrl's ``CrossGroupCritic`` reads all groups' observations.

    Each group's observations go through its own encoder (``Linear(obs_dim, d_model)``), one
    MLP trunk (``hidden``) reads the whole team, and each group has its own value head. Every
    group's loss uses this one module: the optimizer sees its parameters once. With value
    normalisation, each group keeps its own statistics.
    """
    if len(set(hidden)) != 1:
        raise ValueError(
            f"the global critic's trunk has layers of one width (torchrl's CrossGroupCritic); "
            f"model.hidden={list(hidden)}"
        )
    for g, s in groups.items():  # the CrossGroupCritic's Linear encoders read one flat vector per agent
        shapes = [list(s.inputs[k].shape[1:]) for k in s.observation_keys]
        if len(shapes) != 1 or len(shapes[0]) != 1:
            raise ConfigError(
                f"model.critic=global reads one flat vector per agent of each group (torchrl's CrossGroupCritic), "
                f"but group {g!r} observes {dict(zip(map('/'.join, s.observation_keys), shapes))}; use model.critic="
                "group: MAPPO's centralised critic of each group reads all its agents (model.kind=cnn encodes images)"
            )
    group_map = {
        g: CrossCriticGroupSpec(
            obs_dim=observation_dim(s), n_agents=s.n_agents, obs_key=s.observation_keys[0], value_key=s.keys.value
        )
        for g, s in groups.items()
    }
    critic = CrossGroupCritic(
        group_map,
        d_model=d_model,
        trunk_depth=len(hidden),
        trunk_cells=hidden[0],
        activation_class=ACTIVATIONS[activation],
        share_params=False,
        device=device,
    )
    if value_norm == "none":
        return critic
    norms = {g: make_value_norm(value_norm, popart_beta, device) for g in groups}
    layers = (
        {g: (critic.module.group_heads[g].weight, critic.module.group_heads[g].bias) for g in groups}
        if value_norm == "popart"
        else {}
    )
    return TensorDictModule(
        NormalizedValueNet(critic.module, norms, layers), in_keys=critic.in_keys, out_keys=critic.out_keys
    )


def make_value_norm(kind: str, popart_beta: float, device=None) -> ValueNorm:
    """torchrl's normaliser for ``loss.value_norm``: Welford's exact statistics or PopArt's EMA."""
    if kind == "running":
        return RunningValueNorm(shape=1, device=device)
    if kind == "popart":
        return PopArtValueNorm(shape=1, beta=popart_beta, device=device)
    raise ValueError(f"unknown value normalisation {kind!r}; use 'none', 'running' or 'popart'")


class NormalizedValueNet(nn.Module):
    """``net`` outputs normalised values (one output per group); this returns them de-normalised.

    ``output_layers`` (PopArt) maps a group to the ``(weight, bias)`` of the layer that
    produces its value, rescaled by :func:`update_value_norm` so that the de-normalised
    values do not move when the statistics do.
    """

    def __init__(
        self,
        net: nn.Module,
        norms: Mapping[str, ValueNorm],
        output_layers: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    ) -> None:
        super().__init__()
        self.net = net
        self.norms = nn.ModuleDict(dict(norms))
        self._output_layers = dict(output_layers)  # plain references: the parameters live in net

    def forward(self, *inputs: torch.Tensor):
        out = self.net(*inputs)
        if isinstance(out, tuple):
            return tuple(norm.denormalize(v) for norm, v in zip(self.norms.values(), out))
        return next(iter(self.norms.values())).denormalize(out)


class SlicedValueNorm(nn.Module):
    """Several groups' normalisers over their groups concatenated along the agent dim (a bundle:
    group ``i``'s agents at ``[i * n, (i + 1) * n)``). Holds them without registering them."""

    def __init__(self, norms: Sequence[ValueNorm], n_agents: int) -> None:
        super().__init__()
        self._norms = tuple(norms)
        self.n_agents = n_agents

    def _each(self, x: torch.Tensor, fn: str) -> torch.Tensor:
        chunks = x.split(self.n_agents, dim=-2)
        return torch.cat([getattr(norm, fn)(c) for norm, c in zip(self._norms, chunks)], dim=-2)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return self._each(x, "normalize")

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        return self._each(x, "denormalize")


def value_norms(critic: nn.Module) -> dict[str, tuple[ValueNorm, tuple | None]]:
    """``{group: (normaliser, PopArt output layer or None)}`` of a critic built here; ``{}`` without one."""
    net = next((m for m in critic.modules() if isinstance(m, NormalizedValueNet)), None)
    if net is None:
        return {}
    return {g: (norm, net._output_layers.get(g)) for g, norm in net.norms.items()}


@torch.no_grad()
def update_value_norm(norm: ValueNorm, targets: torch.Tensor, layer: tuple | None) -> None:
    """Folds one batch of value targets ``[N, 1]`` into ``norm``; for PopArt, preserves the outputs.

    PopArt (van Hasselt et al. 2016): with ``v = std * (W h + b) + mean``, new statistics
    ``mean', std'`` keep ``v`` unchanged when ``W' = W std / std'`` and
    ``b' = (std b + mean - mean') / std'``. The first update is not preserved: the
    statistics start from nothing, and the untrained critic has nothing to preserve.
    """
    fresh = _updates(norm) == 0
    old_mean, old_std = norm.denormalize(torch.zeros_like(norm.scale())), norm.scale()
    norm.update(targets)
    if layer is None or fresh:
        return
    new_mean, new_std = norm.denormalize(torch.zeros_like(norm.scale())), norm.scale()
    weight, bias = layer
    weight.mul_(old_std / new_std)
    bias.mul_(old_std).add_(old_mean - new_mean).div_(new_std)


def _updates(norm: ValueNorm) -> float:
    if isinstance(norm, RunningValueNorm):
        return float(norm.count)
    return float(norm.debiasing_term)


def output_layer(net: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(weight, bias)`` of the last linear layer of one of our agent MLPs (PopArt rescales it)."""
    if isinstance(net, SharedAgentMLP):
        last = net.net[-1]
        return last.weight, last.bias
    if isinstance(net, MultiAgentMLP):  # per-agent weights stacked in one TensorDictParams
        last = max((k for k in net.params.keys() if (k, "weight") in net.params.keys(True)), key=int)
        return net.params[last, "weight"], net.params[last, "bias"]
    out = getattr(net, "output_layer", None)
    if isinstance(out, nn.Linear):
        return out.weight, out.bias
    raise ValueError(
        f"loss.value_norm=popart rescales the critic's output layer, and {type(net).__name__} "
        "has none it can find (expected one of our MLPs, or an `output_layer` nn.Linear)"
    )


def check_every_group_acts(reset_td, groups: Mapping[str, GroupSpec]) -> None:
    """Refuses a global critic for an env whose groups do not all act at every step (turn-based games).

    A global critic gives every group a value of the whole team's observations at every step;
    in a turn-based game only the player to move has a meaningful observation and its opponent's
    entries are padding. Read from the agents' ``mask`` after a reset.
    """
    idle = [
        g
        for g, s in groups.items()
        if s.keys.mask is not None and s.keys.mask in reset_td.keys(True) and not bool(reset_td.get(s.keys.mask).all())
    ]
    if idle:
        raise ValueError(
            f"model.critic=global needs every group to act at every step, but group(s) {idle} do not "
            "act after a reset (a turn-based game); use model.critic=group"
        )
