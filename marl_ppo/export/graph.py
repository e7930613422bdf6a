"""A group's deterministic policy as a function of plain tensors: what the exporters trace.

:func:`policy_graph` wraps a group's actor (any model kind: MLP, recurrent, CNN, DeepSets, GNN, a
chain) in :class:`PolicyGraph`, whose ``forward`` takes the group's inputs as positional tensors and
returns its outputs as a tuple, so that ``torch.export`` can capture it without tensordicts at the
boundary. Every entry crossing the boundary is a :class:`Port`: its graph name, the tensordict key
it carries, its shape (``"batch"`` for the free leading dim) and dtype.

Inputs, in order: the group's observation entries (``observation``, or several: ``pixels``,
``vector``...), its legal-action mask (``action_mask``), a recurrent policy's state
(``actor_hidden``, an LSTM also ``actor_cell``) and ``is_init`` (``[batch, 1]``, true where an
episode starts: the state restarts from zero there). Outputs: the action (a composite action: one
output per head, ``action.move``, ``action.comm``), or with ``outputs="params"`` each head's
distribution parameters (``loc`` and ``scale``, or ``logits``, before any mask), then the next
recurrent state (``next.actor_hidden``).

Two layouts: ``group`` reads ``[batch, n_agents, ...]`` (a row is the whole group in one env copy;
every policy can), ``agent`` reads ``[batch, ...]`` (a row is one agent; a policy whose agents
share parameters and do not read each other: ``mlp``, ``gru``, ``lstm``, ``cnn``, ``deepsets`` over
each agent's own sets). A policy holding a module that reads other agents (a ``gnn``'s graph, a
centralised trunk, a set pooled over the agents, or any module with ``reads_other_agents = True``)
is refused for ``agent`` by its structure, before any row is run: a radius GNN agrees with itself
on rows where no two agents are near, so no check on rows alone can clear it.

>>> from torchrl.envs.libs.vmas import VmasEnv
>>> from marl_ppo.groups.specs import read_group_specs
>>> from marl_ppo.models.actor import build_actor
>>> group = read_group_specs(VmasEnv("navigation", num_envs=2, n_agents=2, seed=0))["agents"]
>>> graph = policy_graph(build_actor(group, hidden=(8,)), group)
>>> [(p.name, p.shape) for p in graph.inputs], [(p.name, p.shape, p.dtype) for p in graph.outputs]
([('observation', ('batch', 2, 18))], [('action', ('batch', 2, 2), 'float32')])
>>> graph(*graph.example(3))[0].shape
torch.Size([3, 2, 2])
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tensordict import TensorDict
from tensordict.utils import NestedKey
from torch import nn
from torchrl.envs import ExplorationType, set_exploration_type

from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.distributions import action_heads
from marl_ppo.models.recurrent import recurrent_modules

__all__ = ["Port", "PolicyGraph", "policy_graph", "LAYOUTS", "OUTPUTS", "ExportError"]

LAYOUTS = ("group", "agent")
OUTPUTS = ("action", "params")


class ExportError(ValueError):
    """A policy that cannot be exported as asked: the message says why and what would do."""


@dataclass(frozen=True)
class Port:
    """One tensor crossing the graph's boundary."""

    name: str
    key: NestedKey
    shape: tuple[int | str, ...]  # "batch": the free leading dim
    dtype: str  # torch's name without the prefix: float32, uint8, bool, int64

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


def _name(key: NestedKey) -> str:
    """A port's name: the key inside the group (``("g", "action", "move")`` -> ``action.move``)."""
    return ".".join(key[2:] if key[0] == "next" else key[1:]) if key[0] != "next" else "next." + ".".join(key[2:])


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class PolicyGraph(nn.Module):
    """``actor`` (a copy, without gradients, in eval mode) as ``forward(*inputs) -> tuple(outputs)``,
    actions taken deterministically (each head's mode; a bounded box: ``tanh`` of the mean, scaled)."""

    def __init__(self, actor: nn.Module, inputs: Sequence[Port], outputs: Sequence[Port], layout: str) -> None:
        super().__init__()
        self.actor = copy.deepcopy(actor).requires_grad_(False).eval()
        self.inputs, self.outputs, self.layout = list(inputs), list(outputs), layout

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        per_agent = self.layout == "agent"
        entries = {
            p.key: t.unsqueeze(1) if per_agent and p.key != "is_init" else t for p, t in zip(self.inputs, tensors)
        }
        td = TensorDict(entries, batch_size=tensors[0].shape[:1])
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            td = self.actor(td)
        outs = [td.get(p.key) for p in self.outputs]
        return tuple(o.squeeze(1) if per_agent else o for o in outs)

    def example(self, batch: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
        """Random inputs for ``batch`` rows: observations in their spec's range, masks with one legal
        action at least per agent, states of N(0, 1), ``is_init`` false."""
        out = []
        for p in self.inputs:
            shape = (batch, *p.shape[1:])
            if p.dtype == "bool" and p.name == "is_init":
                out.append(torch.zeros(shape, dtype=torch.bool))
            elif p.dtype == "bool":  # a mask: random, the first legal action kept where none is
                mask = torch.rand(shape, generator=generator) < 0.5
                mask[..., 0] |= ~mask.any(-1)
                out.append(mask)
            elif p.dtype == "uint8":
                out.append(torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8))
            else:
                out.append(torch.randn(shape, generator=generator).to(p.torch_dtype))
        return tuple(out)


def _output_keys(group: GroupSpec, outputs: str) -> list[NestedKey]:
    g, heads = group.name, action_heads(group)
    if outputs == "action":
        return [group.keys.action + h.name for h in heads]
    if not group.is_composite_action:
        return [(g, p) for p in heads[0].param_names]
    return [(g, "params", *h.name, p) for h in heads for p in h.param_names]


def policy_graph(actor: nn.Module, group: GroupSpec, *, outputs: str = "action", layout: str = "group") -> PolicyGraph:
    """``group``'s ``actor`` as a :class:`PolicyGraph` (see the module docstring for its ports).

    An :class:`ExportError` for an unknown ``outputs``/``layout``, and for ``layout="agent"`` on a policy
    whose agents do not share their parameters or read each other (``gnn``, a centralised trunk).
    """
    if outputs not in OUTPUTS:
        raise ExportError(f"outputs={outputs!r}: expected one of {list(OUTPUTS)}")
    if layout not in LAYOUTS:
        raise ExportError(f"layout={layout!r}: expected one of {list(LAYOUTS)}")
    n = group.n_agents
    spec = group.inputs
    ins = [Port(_name(k), k, ("batch", *spec[k].shape), _dtype(spec[k].dtype)) for k in group.observation_keys]
    if group.action_mask_key is not None:
        width = action_heads(group)[0].n_params
        ins.append(Port(_name(group.action_mask_key), group.action_mask_key, ("batch", n, width), "bool"))
    rnns = recurrent_modules(actor)
    states = [(k, rnn.state_shape) for rnn in rnns for k in rnn.state_keys]
    ins += [Port(_name(k), k, ("batch", *shape), "float32") for k, shape in states]
    if rnns:
        ins.append(Port("is_init", "is_init", ("batch", 1), "bool"))
    graph = PolicyGraph(actor, ins, [], "group")
    # the outputs' shapes and dtypes, read off one call
    out_keys = _output_keys(group, outputs) + [("next", *k) for k, _ in states]
    graph.outputs = [Port(_name(k), k, (), "float32") for k in out_keys]
    probe = graph(*graph.example(2))
    graph.outputs = [
        Port(p.name, p.key, ("batch", *t.shape[1:]), _dtype(t.dtype)) for p, t in zip(graph.outputs, probe)
    ]
    if layout == "agent":
        return _per_agent(graph, group)
    return graph


def reads_other_agents(actor: nn.Module) -> str | None:
    """What in ``actor`` reads other agents' inputs or holds one set of parameters per agent, in words;
    ``None`` if nothing does (the agent layout can run it one agent at a time)."""
    from torchrl.modules.models.multiagent import MultiAgentNetBase

    from marl_ppo.models.deepsets import SetEncoder
    from marl_ppo.models.gnn import AgentGraph

    for module in actor.modules():
        if isinstance(module, AgentGraph):
            return "a gnn, whose agents exchange messages over their graph"
        if isinstance(module, SetEncoder) and module.team is not None:
            return "a deepsets trunk pooled over the agents"
        if isinstance(module, MultiAgentNetBase) and module.centralized:
            return f"a centralised trunk ({type(module).__name__}, reading every agent's input)"
        if isinstance(module, MultiAgentNetBase) and not module.share_params:
            return f"one set of parameters per agent ({type(module).__name__}, model.share_params=false)"
        if getattr(module, "agent_id", False) is True:
            return "an agent id (model.agent_id=true: each agent reads its index in the group, its row's place)"
        if getattr(module, "reads_other_agents", False) is True:
            return f"{type(module).__name__} (reads_other_agents=True)"
    return None


def _per_agent(grouped: PolicyGraph, group: GroupSpec) -> PolicyGraph:
    """``grouped`` with one agent per row, if each agent's action depends on its own row only: nothing in
    the policy reads other agents (:func:`reads_other_agents`), and the group layout's actions, agent by
    agent, equal the agent layout's on the same random rows (else an ExportError, as for a policy that
    cannot run one agent at a time). The run-back check on the run's own observations
    (:mod:`~marl_ppo.export.rows`) compares it with the trained policy again, where the agents meet."""
    n = group.n_agents
    what = reads_other_agents(grouped.actor)
    if what is not None:
        raise ExportError(
            f"group {group.name!r}: --layout agent runs each agent alone, but this policy has {what}; "
            "export it with --layout group"
        )
    graph = PolicyGraph(
        _one_agent(grouped.actor), [_row(p) for p in grouped.inputs], [_row(p) for p in grouped.outputs], "agent"
    )
    why = None
    inputs = grouped.example(2, torch.Generator().manual_seed(0))
    try:
        want = grouped(*inputs)
        rows = [
            t.repeat_interleave(n, 0) if p.key == "is_init" else t.flatten(0, 1) for p, t in zip(grouped.inputs, inputs)
        ]
        got = graph(*rows)
        if any(not torch.allclose(w.flatten(0, 1).float(), o.float(), atol=1e-5) for w, o in zip(want, got)):
            why = "an agent's action depends on the other agents' rows"
    except (RuntimeError, ValueError) as err:
        why = f"it does not run one agent at a time ({type(err).__name__}: {str(err).splitlines()[0]})"
    if why is not None:
        raise ExportError(
            f"group {group.name!r}: layout=agent exports one agent per row, but {why} (agents with their own "
            "parameters, or a model that reads every agent: gnn, a centralised trunk); use layout=group"
        )
    return graph


def _one_agent(actor: nn.Module) -> nn.Module:
    """A copy of ``actor`` whose modules expect one agent per group: the agent count the multi-agent
    networks check their inputs against is set to 1 (their parameters, if shared, serve any count)."""
    actor = copy.deepcopy(actor)
    for module in actor.modules():
        if isinstance(getattr(module, "n_agents", None), int):
            module.n_agents = 1
    return actor


def _row(port: Port) -> Port:
    """The agent layout's port of a group layout's one (``[batch, n, ...]`` -> ``[batch, ...]``)."""
    if port.key == "is_init":
        return port
    return Port(port.name, port.key, ("batch", *port.shape[2:]), port.dtype)
