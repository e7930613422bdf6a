"""MLPs over a group's agents: ``[*B, n_agents, obs] -> [*B, n_agents, n_out]``.

With parameter sharing, our :class:`SharedAgentMLP` (a plain ``nn.Sequential``); without it,
:class:`PerAgentMLP`, torchrl's ``MultiAgentMLP`` (one set of weights per agent, the same
parameters and checkpoints) computed with batched matmuls instead of ``vmap``.
``centralized=True`` reads all the group's observations (MAPPO's critic).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torchrl.modules import MultiAgentMLP

from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.activations import Tanh

__all__ = ["ACTIVATIONS", "PerAgentMLP", "SharedAgentMLP", "agent_mlp", "observation_dim"]

# Tanh: nn.Tanh that stays on ATen's kernel under torch.compile (see marl_ppo.models.activations)
ACTIVATIONS = {"tanh": Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}


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
    >>> ided = SharedAgentMLP(4, 1, n_agents=3, centralized=True, hidden=(8,), activation_class=torch.nn.Tanh,
    ...                       agent_id=True)
    >>> v = ided(torch.randn(5, 3, 4)); v.shape, bool((v == v[:, :1]).all())  # one value per agent
    (torch.Size([5, 3, 1]), False)
    """

    def __init__(
        self,
        n_agent_inputs: int,
        n_agent_outputs: int,
        n_agents: int,
        *,
        centralized: bool,
        hidden: Sequence[int],
        activation_class: type[nn.Module],
        device=None,
        agent_id: bool = False,
    ) -> None:
        super().__init__()
        self.n_agents, self.centralized, self.agent_id = n_agents, centralized, agent_id
        layers, last = [], n_agent_inputs * (n_agents if centralized else 1) + (n_agents if agent_id else 0)
        for width in hidden:
            layers += [nn.Linear(last, width, device=device), activation_class()]
            last = width
        self.net = nn.Sequential(*layers, nn.Linear(last, n_agent_outputs, device=device))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.shape[-2] != self.n_agents:
            raise ValueError(f"expected observations [*B, {self.n_agents}, obs_dim], got {list(obs.shape)}")
        if self.agent_id:  # [*B, n, d] beside the one-hot [n, n] of each agent's index (no parameters, no state)
            x = obs.flatten(-2, -1).unsqueeze(-2) + torch.zeros_like(obs[..., :1]) if self.centralized else obs
            eye = torch.eye(self.n_agents, dtype=obs.dtype, device=obs.device)
            # broadcast, not expanded to a shape: a traced export keeps its batch size free
            obs = torch.cat([x, torch.zeros_like(x[..., :1]) + eye], dim=-1)
        if not self.centralized or self.agent_id:
            # the rows as one matrix: under torch.vmap over seeds (core/seeds.py) a [*B, n, d] input would make
            # matmul broadcast each seed's weight over *B (a copy of it per row: 10x the update's time, Hanabi);
            # -1 for the batch, never its size: an export's captured graph would hold the size as a constant
            out = self.net(obs.flatten(0, -2))
            return out.reshape(-1, *obs.shape[1:-1], out.shape[-1])
        out = self.net(obs.flatten(-2, -1)).unsqueeze(-2)
        return out.expand(*out.shape[:-2], self.n_agents, out.shape[-1])


class PerAgentMLP(MultiAgentMLP):
    """torchrl's ``MultiAgentMLP(share_params=False)``, each layer run as one ``baddbmm`` over the agents.

    The parameters are ``MultiAgentMLP``'s own (``params``, stacked ``[n_agents, ...]``), so
    checkpoints, many seeds (``core/seeds.py``), PopArt and HAPPO see no difference. Its forward
    runs every agent's weights through ``torch.vmap``, which swaps them into an empty network on
    each call: 0.2 ms for 2 agents on 10 rows on CPU, against 0.045 ms for the batched matmuls
    here (written by hand: torchrl has no stacked-weights MLP; docs/performance.md). The values are the
    same as ``MultiAgentMLP``'s (``tests/models/test_per_agent_mlp.py``).

    >>> import torch
    >>> net = PerAgentMLP(n_agent_inputs=4, n_agent_outputs=2, n_agents=3, centralized=False,
    ...     share_params=False, depth=1, num_cells=[8], activation_class=torch.nn.Tanh)
    >>> x = torch.randn(5, 3, 4)
    >>> bool(torch.allclose(net(x), MultiAgentMLP.forward(net, x), atol=1e-6))
    True
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        # each layer of the (parameter-free) template network: a Linear read from ``params``, or run as is
        self._layers = [
            (str(i), None) if isinstance(layer, nn.Linear) else (None, layer) for i, layer in enumerate(self._empty_net)
        ]

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting():  # export: torchrl's path (the batched one reshapes by the batch
            return super().forward(*inputs)  # size, which TorchScript's trace would turn into a constant)
        x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
        n = self.n_agents
        if x.shape[-2] != n:
            raise ValueError(f"expected observations [*B, {n}, obs_dim], got {list(x.shape)}")
        batch = x.shape[:-2]
        if self.centralized:  # every agent's network reads the whole group's observations
            x = x.reshape(1, -1, n * x.shape[-1]).expand(n, -1, -1)
        else:
            x = x.reshape(-1, n, x.shape[-1]).transpose(0, 1)
        for key, layer in self._layers:
            if key is None:
                x = layer(x)
            else:
                weight, bias = self.params[key, "weight"], self.params[key, "bias"]
                x = torch.baddbmm(bias.unsqueeze(-2), x, weight.transpose(-1, -2))
        return x.transpose(0, 1).reshape(*batch, n, x.shape[-1])


def agent_mlp(
    group: GroupSpec,
    n_out: int,
    *,
    centralized: bool,
    share_params: bool,
    hidden: Sequence[int],
    activation: str,
    device: torch.device | str | None,
    n_inputs: int | None = None,
    agent_id: bool = False,
) -> nn.Module:
    """An MLP over the group's agents; ``n_inputs`` per agent (default: the observation size). ``agent_id``:
    each agent's one-hot index is appended to its input (shared weights only: unshared ones are the agent's
    own already, and take none)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; known: {sorted(ACTIVATIONS)}")
    obs_dim = observation_dim(group) if n_inputs is None else n_inputs
    if share_params:
        return SharedAgentMLP(
            obs_dim,
            n_out,
            group.n_agents,
            centralized=centralized,
            hidden=hidden,
            activation_class=ACTIVATIONS[activation],
            device=device,
            agent_id=agent_id,
        )
    return PerAgentMLP(
        n_agent_inputs=obs_dim,
        n_agent_outputs=n_out,
        n_agents=group.n_agents,
        centralized=centralized,
        share_params=False,
        depth=len(hidden),
        num_cells=list(hidden),
        activation_class=ACTIVATIONS[activation],
        device=device,
    )


def observation_dim(group: GroupSpec) -> int:
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
