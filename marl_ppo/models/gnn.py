"""The ``gnn`` model kind: message passing over the agents of a group.

Each agent is a node; its observation (every vector entry, joined) is encoded to ``hidden[-1]``
features. An edge ``j -> i`` exists for every other agent (``topology: full``) or for those within
``radius`` of agent ``i`` (``topology: from_pos``, the positions read from the observation slice
``position``). A layer sends each neighbour's message ``act(W_m [h_j, e_ij])``, with edge features
``e_ij`` = the relative position ``p_j - p_i`` (and velocity ``v_j - v_i`` with ``velocity``) and
their distance, takes their mean at ``i`` (no neighbour: zeros), and updates ``h_i = act(W_u [h_i,
mean])``; ``layers`` such layers. VMAS observations start with the agent's position and velocity
(``position: [0, 2]``, ``velocity: [2, 4]`` for ``navigation``). As a centralised critic, the graph is
full: every agent's value hears every other agent.

Written by hand, dense over the agents of a group (``[*B, n, n]`` adjacency): torch-geometric's dense
layers take no edge features, its sparse ones batch graphs through scatter operations that
``torch.vmap`` (many seeds in one process) cannot run, and its ``radius_graph`` needs
``torch-cluster``, which has no wheel for this torch. Groups have few agents; the dense form is
also the fastest here.

Options (``model.options.gnn``): ``topology``, ``radius``, ``position``, ``velocity``, ``layers``. A
``radius`` is read with ``topology: from_pos`` only: given under ``full``, the config refuses it
(:class:`~marl_ppo.models.options.ModelConfig`) rather than ignore it.

>>> import torch
>>> from torchrl.data import Unbounded
>>> from marl_ppo.groups.specs import GroupSpec, inputs_spec
>>> key = ("g", "observation")
>>> group = GroupSpec("g", ("a", "b", "c"), (key,), Unbounded(shape=(3, 2)), 0, ("g", "reward"),
...                   observation_spec=inputs_spec({key: Unbounded(shape=(3, 6))}, 3))
>>> trunk = gnn_trunk(group, group.inputs, role="actor", centralized=False, share_params=True, hidden=[16],
...                   activation="tanh", topology="from_pos", radius=1.0, position=[0, 2], velocity=None, layers=1)
>>> obs = torch.zeros(4, 3, 6); obs[..., 0] = torch.tensor([0.0, 0.5, 3.0])
>>> trunk.module.module.adjacency(obs)[0].int().tolist()  # agents 0 and 1 are within 1.0; agent 2 is alone
[[0, 1, 0], [1, 0, 0], [0, 0, 0]]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict.nn import TensorDictSequential
from torch import nn

from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.inputs import flat_inputs
from marl_ppo.models.mlp import ACTIVATIONS
from marl_ppo.models.modules import TensorOutModule
from marl_ppo.models.registry import Trunk
from marl_ppo.options import ConfigError

__all__ = ["GraphLayer", "AgentGraph", "gnn_trunk"]


class GraphLayer(nn.Module):
    """One message-passing layer: ``h_i <- act(W_u [h_i, mean_{j in N(i)} act(W_m [h_j, e_ij])])``."""

    def __init__(self, width: int, edge_dim: int, activation_class: type[nn.Module], device=None) -> None:
        super().__init__()
        self.width = width
        self.message = nn.Linear(width + edge_dim, width, device=device)
        self.update = nn.Linear(2 * width, width, device=device)
        self.activation = activation_class()

    def forward(self, h: torch.Tensor, edges: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        # W_m [h_j, e_ij] = W_h h_j + W_e e_ij: the node part once per sender (n rows, not n^2), the
        # edge part on the few edge features; the same maths as the concatenation, n times fewer flops
        w_h, w_e = self.message.weight[:, : self.width], self.message.weight[:, self.width :]
        from_sender = (h @ w_h.T + self.message.bias).unsqueeze(-3)  # [.., 1, j, F]
        # without edge features every receiver gets the same [.., 1, j, F]: the weights below broadcast it
        messages = self.activation(from_sender + edges @ w_e.T if w_e.shape[1] else from_sender)
        weights = adjacency.to(h.dtype)
        count = weights.sum(-1, keepdim=True).clamp(min=1.0)
        pooled = (messages * weights.unsqueeze(-1)).sum(-2) / count
        return self.activation(self.update(torch.cat([h, pooled], dim=-1)))


class AgentGraph(nn.Module):
    """The encoder, the graph of the agents and the layers (see the module docstring)."""

    def __init__(
        self,
        n_in: int,
        width: int,
        *,
        layers: int,
        position: Sequence[int] | None,
        velocity: Sequence[int] | None,
        radius: float | None,
        activation_class: type[nn.Module],
        device=None,
    ) -> None:
        super().__init__()
        self.position = tuple(position) if position else None
        self.velocity = tuple(velocity) if velocity else None
        self.radius = radius
        edge_dim = 0
        if self.position:
            edge_dim += self.position[1] - self.position[0] + 1  # relative position and distance
        if self.velocity:
            edge_dim += self.velocity[1] - self.velocity[0]
        self.encoder = nn.Sequential(nn.Linear(n_in, width, device=device), activation_class())
        self.layers = nn.ModuleList(GraphLayer(width, edge_dim, activation_class, device) for _ in range(layers))

    def adjacency(self, obs: torch.Tensor) -> torch.Tensor:
        """``[*B, n, n]``: ``[.., i, j]`` whether ``j`` sends to ``i`` (never itself)."""
        n = obs.shape[-2]
        others = ~torch.eye(n, dtype=torch.bool, device=obs.device)
        if self.radius is None:
            # broadcast against [*B, n, 1] rather than expanded to sizes read off obs: a traced graph
            # (marl-ppo export, TorchScript) keeps its batch free
            return others & torch.ones_like(obs[..., :1], dtype=torch.bool)
        pos = obs[..., self.position[0] : self.position[1]]
        distance = torch.linalg.vector_norm(pos.unsqueeze(-3) - pos.unsqueeze(-2), dim=-1)
        return others & (distance <= self.radius)

    def edges(self, obs: torch.Tensor) -> torch.Tensor:
        """``[*B, n, n, edge_dim]``: ``[.., i, j]`` = ``p_j - p_i``, ``|p_j - p_i|``, ``v_j - v_i``."""
        n, parts = obs.shape[-2], []
        if self.position:
            pos = obs[..., self.position[0] : self.position[1]]
            relative = pos.unsqueeze(-3) - pos.unsqueeze(-2)
            parts += [relative, torch.linalg.vector_norm(relative, dim=-1, keepdim=True)]
        if self.velocity:
            vel = obs[..., self.velocity[0] : self.velocity[1]]
            parts.append(vel.unsqueeze(-3) - vel.unsqueeze(-2))
        if not parts:
            return obs.new_zeros(*obs.shape[:-2], n, n, 0)
        return torch.cat(parts, dim=-1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        obs = obs.to(torch.float32)
        adjacency, edges = self.adjacency(obs), self.edges(obs)
        h = self.encoder(obs)
        for layer in self.layers:
            h = layer(h, edges, adjacency)
        return h


def _slice(name: str, value, width: int) -> Sequence[int] | None:
    if value is None:
        return None
    if len(value) != 2 or not 0 <= value[0] < value[1] <= width:
        raise ConfigError(
            f"model.options.gnn.{name} must be [start, stop] within the observation's {width} features, got {value}"
        )
    return value


def gnn_trunk(
    group: GroupSpec,
    inputs,
    *,
    role: str,
    centralized: bool,
    share_params: bool,
    hidden: Sequence[int],
    activation: str,
    device=None,
    topology: str,
    radius: float,
    position: Sequence[int] | None,
    velocity: Sequence[int] | None,
    layers: int,
) -> Trunk:
    """The ``gnn`` kind's trunk (see the module docstring). The agents share the graph's parameters
    (a node is any agent); ``model.share_params=false`` gives each agent its own output layer."""
    if topology not in ("full", "from_pos"):
        raise ConfigError(f"model.options.gnn.topology must be full or from_pos, got {topology!r}")
    if not isinstance(layers, int) or layers < 1:
        raise ConfigError(f"model.options.gnn.layers must be an integer >= 1, got {layers!r}")
    concat, key, width = flat_inputs(group, inputs, kind="gnn")
    position, velocity = _slice("position", position, width), _slice("velocity", velocity, width)
    if topology == "from_pos" and position is None:
        raise ConfigError(
            "model.options.gnn.topology=from_pos needs the agents' positions: set model.options.gnn.position "
            "to their slice of the observation, e.g. [0, 2] for VMAS"
        )
    if topology == "from_pos" and not radius > 0:
        raise ConfigError(f"model.options.gnn.radius must be > 0 with topology=from_pos, got {radius!r}")
    graph = AgentGraph(
        width, hidden[-1], layers=layers, position=position, velocity=velocity,
        radius=None if topology == "full" or centralized else float(radius),
        activation_class=ACTIVATIONS[activation], device=device,
    )  # fmt: skip
    out_key = (group.name, f"{role}_gnn")
    module = TensorOutModule(graph, in_keys=[key], out_keys=[out_key])
    if concat is not None:
        module = TensorDictSequential(concat, module)
    return Trunk(module, out_key, hidden[-1])
