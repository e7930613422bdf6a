"""The ``deepsets`` model kind: permutation-invariant encoders over sets of entities and over agents.

A set entry is ``[*B, n_agents, N, F]`` (``N`` entities of ``F`` features per agent: the other agents,
landmarks, items). Each element goes through φ (an MLP of ``phi`` widths, shared by the elements),
the elements are pooled (``pool``: ``mean``, ``sum`` or ``max``) into one vector per agent, the group's
vector entries are joined, and ρ (an MLP of ``model.hidden``) gives each agent's encoding
``hidden[-1]`` wide (Zaheer et al., 2017).

As a centralised critic (``model.critic_kind=deepsets`` under MAPPO), the agents' encodings are
pooled in turn, by a mean over the agents that are present (the group's ``mask`` entry where the
env writes one: agents that left mid-episode count for nothing), and one more layer gives every
agent the team's value features: the critic is the same for any order of the agents, and for any
number of them. On a group with vector entries only, this is a permutation-invariant team critic; a
policy or a decentralised critic there is an MLP on the vectors (warned: ``model.kind=mlp
model.critic_kind=deepsets`` is the team critic beside an MLP policy).

Options (``model.options.deepsets``): ``phi`` (φ's layer widths), ``pool``.

>>> import torch
>>> from torchrl.data import Unbounded
>>> from marl_ppo.groups.specs import GroupSpec, inputs_spec
>>> key = ("g", "others")
>>> group = GroupSpec("g", ("a", "b"), (key,), Unbounded(shape=(2, 3)), 0, ("g", "reward"),
...                   observation_spec=inputs_spec({key: Unbounded(shape=(2, 5, 4))}, 2))
>>> trunk = deepsets_trunk(group, group.inputs, role="actor", centralized=False, share_params=True,
...                        hidden=[16], activation="tanh", phi=[8], pool="mean")
>>> x = torch.randn(3, 2, 5, 4)
>>> out = trunk.module.module(x)
>>> out.shape, torch.allclose(out, trunk.module.module(x[:, :, torch.randperm(5)]), atol=1e-6)
(torch.Size([3, 2, 16]), True)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn

from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.mlp import ACTIVATIONS, agent_mlp
from marl_ppo.models.modules import TensorOutModule
from marl_ppo.models.registry import Trunk
from marl_ppo.options import ConfigError

__all__ = ["SetEncoder", "deepsets_trunk"]

POOLS = ("mean", "sum", "max")


class SetEncoder(nn.Module):
    """φ per element and pooling per set entry, the vectors joined, ρ per agent; a team pooling for a
    centralised critic (see the module docstring). Inputs: the sets, the vectors, then the mask if any."""

    def __init__(
        self, phis: nn.ModuleList, rho: nn.Module, *, n_vectors: int, pool: str, team: nn.Module | None, masked: bool
    ) -> None:
        super().__init__()
        self.phis, self.rho, self.team = phis, rho, team
        self.n_vectors, self.pool, self.masked = n_vectors, pool, masked

    def _pool(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        if self.pool == "max":
            return x.amax(dim)
        return x.sum(dim) if self.pool == "sum" else x.mean(dim)

    def forward(self, *entries: torch.Tensor) -> torch.Tensor:
        n_sets = len(self.phis)
        sets, vectors = entries[:n_sets], entries[n_sets : n_sets + self.n_vectors]
        parts = [self._pool(phi(s.to(torch.float32)), -2) for phi, s in zip(self.phis, sets)]
        y = self.rho(torch.cat([*parts, *(v.to(torch.float32) for v in vectors)], dim=-1))
        if self.team is None:
            return y
        if self.masked:  # the mean over the agents present
            present = entries[-1].reshape(*y.shape[:-1], 1).to(y.dtype)
            team = (y * present).sum(-2) / present.sum(-2).clamp(min=1.0)
        else:
            team = y.mean(-2)
        team = self.team(team).unsqueeze(-2)
        return team.expand(*team.shape[:-2], y.shape[-2], team.shape[-1])


def _say_no_set(group: str, role: str, shapes: dict) -> None:
    """Warns that a ``deepsets`` network reading no set entry is an MLP (ρ on the vectors, nothing pooled):
    what ``model.kind=deepsets`` gives on plain vector observations, said rather than substituted silently."""
    network = "policy" if role == "actor" else "decentralised critic"
    entries = {"/".join(k[1:]): list(s) for k, s in shapes.items()}
    warnings.warn(
        f"group {group!r}: model kind 'deepsets' found no set entry [N, F] among its observation entries {entries}: "
        f"its {network} is an MLP on the vectors (nothing to pool). A DeepSets here is a centralised critic, which "
        f"pools the agents (MAPPO): model.kind=mlp model.critic_kind=deepsets says so without this warning",
        UserWarning,
        stacklevel=2,
    )


def deepsets_trunk(
    group: GroupSpec,
    inputs,
    *,
    role: str,
    centralized: bool,
    share_params: bool,
    hidden: Sequence[int],
    activation: str,
    device=None,
    phi: Sequence[int],
    pool: str,
) -> Trunk:
    """The ``deepsets`` kind's trunk (see the module docstring): set entries ``[N, F]`` and vectors per agent."""
    if pool not in POOLS:
        raise ConfigError(f"model.options.deepsets.pool must be one of {list(POOLS)}, got {pool!r}")
    if not phi or any(not isinstance(w, int) or w < 1 for w in phi):
        raise ConfigError(f"model.options.deepsets.phi must list one or more layer widths >= 1, got {phi}")
    shapes = {key: tuple(inputs[key].shape[1:]) for key in group.observation_keys}
    sets = [k for k, s in shapes.items() if len(s) == 2]
    vectors = [k for k, s in shapes.items() if len(s) == 1]
    if len(sets) + len(vectors) != len(shapes):
        raise ConfigError(
            f"group {group.name!r}: model kind 'deepsets' reads sets [N, F] and vectors per agent; the group's "
            f"observation entries have per-agent shapes { {'/'.join(k[1:]): list(s) for k, s in shapes.items()} }"
        )
    if not sets and not centralized:
        _say_no_set(group.name, role, shapes)
    act = ACTIVATIONS[activation]

    def mlp(widths: Sequence[int], n_in: int) -> nn.Sequential:
        layers = []
        for w in widths:
            layers += [nn.Linear(n_in, w, device=device), act()]
            n_in = w
        return nn.Sequential(*layers)

    phis = nn.ModuleList(mlp(phi, shapes[k][-1]) for k in sets)
    width = len(sets) * phi[-1] + sum(shapes[k][0] for k in vectors)
    rho = nn.Sequential(
        agent_mlp(group, hidden[-1], centralized=False, share_params=share_params, hidden=hidden[:-1],
                  activation=activation, device=device, n_inputs=width),
        act(),
    )  # fmt: skip
    team = mlp([hidden[-1]], hidden[-1]) if centralized else None
    masked = centralized and group.keys.mask is not None
    encoder = SetEncoder(phis, rho, n_vectors=len(vectors), pool=pool, team=team, masked=masked)
    in_keys = [*sets, *vectors, *([group.keys.mask] if masked else [])]
    out_key = (group.name, f"{role}_deepsets")
    return Trunk(TensorOutModule(encoder, in_keys=in_keys, out_keys=[out_key]), out_key, hidden[-1])
