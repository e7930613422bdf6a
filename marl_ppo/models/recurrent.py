"""Recurrent policies and critics for a group: torchrl's ``GRUModule``/``LSTMModule`` with the agent
dim folded into the batch.

torchrl 0.14.1 has no multi-agent RNN: ``GRUModule`` on a group key ``[*B, n_agents, F]`` fails
(``Expected input to be 2D or 3D, got 4D``) and ``make_tensordict_primer()`` ignores the agent
dim. :class:`MultiAgentRNN` folds the agents into torchrl's module's batch, keeps one hidden
state per agent in the data (``(group, "actor_hidden")`` ``[*B, n_agents, layers, hidden]``, an LSTM
also ``(group, "actor_cell")``), and resets it where the env's ``is_init`` says an episode starts.
:func:`prime_env` adds the entries (zeros at every reset) and ``is_init`` to an env.

Two modes, as torchrl's (``set_recurrent_mode``):

* step by step (collection, evaluation, advantages): ``[*B, n_agents, F]`` with the stored state of
  each step; writes the next state at ``("next", group, "actor_hidden")``;
* recurrent (the PPO update): ``[chunks, T, n_agents, F]``; each chunk starts from the state
  stored at its first step, restarts from zero at every ``is_init`` inside it, and gradients flow
  through time inside the chunk.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.data import Composite, Unbounded
from torchrl.envs import EnvBase, InitTracker, TensorDictPrimer
from torchrl.modules import GRUModule, LSTMModule

from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.inputs import flat_inputs
from marl_ppo.models.mlp import ACTIVATIONS, agent_mlp
from marl_ppo.models.modules import TensorOutModule
from marl_ppo.models.registry import Trunk

__all__ = ["MultiAgentRNN", "recurrent_trunk", "recurrent_modules", "state_spec", "prime_env", "state_keys"]


class MultiAgentRNN(TensorDictModuleBase):
    """A GRU/LSTM per agent (one set of weights for all agents, or one per agent) on ``[*B, n_agents, F]``.

    >>> import torch
    >>> from tensordict import TensorDict
    >>> rnn = MultiAgentRNN("gru", 4, 8, n_agents=3, in_key=("g", "x"), out_key=("g", "y"), state_prefix=("g", "h"))
    >>> td = TensorDict({("g", "x"): torch.randn(5, 3, 4), "is_init": torch.ones(5, 1, dtype=torch.bool)}, [5])
    >>> rnn(td)["g", "y"].shape, td["next", "g", "h_hidden"].shape
    (torch.Size([5, 3, 8]), torch.Size([5, 3, 1, 8]))
    """

    def __init__(
        self,
        kind: str,
        input_size: int,
        hidden_size: int,
        *,
        n_agents: int,
        in_key,
        out_key,
        state_prefix: tuple[str, str],
        share_params: bool = True,
        device=None,
    ) -> None:
        super().__init__()
        if kind not in ("gru", "lstm"):
            raise ValueError(f"unknown recurrent kind {kind!r}; use 'gru' or 'lstm'")
        self.kind, self.n_agents, self.hidden_size, self.share_params = kind, n_agents, hidden_size, share_params
        group, prefix = state_prefix
        names = ["hidden"] if kind == "gru" else ["hidden", "cell"]
        self.state_keys = [(group, f"{prefix}_{n}") for n in names]
        self._inner_states = ["h"] if kind == "gru" else ["h", "c"]
        self.in_keys = [in_key, *self.state_keys, "is_init"]
        self.out_keys = [out_key, *[("next", *k) for k in self.state_keys]]
        self._in_key, self._out_key = in_key, out_key
        cls = GRUModule if kind == "gru" else LSTMModule
        inner_out = ["y", *[("next", s) for s in self._inner_states]]
        self.cells = nn.ModuleList(
            cls(
                input_size=input_size,
                hidden_size=hidden_size,
                in_keys=["x", *self._inner_states, "is_init"],
                out_keys=inner_out,
                device=device,
            )
            for _ in range(1 if share_params else n_agents)
        )

    @property
    def state_shape(self) -> tuple[int, int, int]:
        """One step's state shape per entry: ``[n_agents, layers, hidden]``."""
        return (self.n_agents, 1, self.hidden_size)

    @property
    def recurrent_mode(self) -> bool:
        return self.cells[0].recurrent_mode

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        x = td.get(self._in_key)
        lead, n = x.shape[:-2], x.shape[-2]
        is_init = td.get("is_init", None)
        if is_init is None:  # a "next" tensordict of an env without InitTracker entries there
            is_init = torch.zeros(*lead, 1, dtype=torch.bool, device=x.device)
        if torch.compiler.is_exporting():  # torchrl's module branches on is_init.any(): no graph can hold that
            y, states = self.step(x, [td.get(key) for key in self.state_keys], is_init)
            td.set(self._out_key, y)
            for key, state in zip(self.state_keys, states):
                td.set(("next", *key), state)
            return td
        entries = {"x": x, "is_init": is_init.unsqueeze(-2).expand(*lead, n, 1)}
        for key, name in zip(self.state_keys, self._inner_states):
            state = td.get(key, None)
            if state is not None:
                entries[name] = state
        recurrent = self.recurrent_mode
        if recurrent:
            if len(lead) != 2:
                raise ValueError(f"recurrent mode reads [chunks, time, n_agents, F]; got {list(x.shape)}")
            # agents ahead of time, folded into the chunks: [N, T, n, ...] -> [N * n, T, ...]
            inner = TensorDict({k: v.transpose(1, 2) for k, v in entries.items()}, batch_size=[lead[0], n, lead[1]])
        else:
            inner = TensorDict(entries, batch_size=[*lead, n])
        if self.share_params:
            out = self.cells[0](inner.reshape(-1, lead[1]) if recurrent else inner)
            out = out.reshape(inner.shape) if recurrent else out
        else:  # one module per agent, on its slice of the agent dim
            dim = 1 if recurrent else len(lead)
            out = torch.stack([cell(agent) for agent, cell in zip(inner.unbind(dim), self.cells)], dim)
        y = out.get("y")
        if recurrent:
            td.set(self._out_key, y.transpose(1, 2))
            return td  # the next states of a chunk are not needed: the update reads the stored ones
        td.set(self._out_key, y)
        for key, name in zip(self.state_keys, self._inner_states):
            td.set(("next", *key), out.get(("next", name)))
        return td

    def step(
        self, x: torch.Tensor, states: Sequence[torch.Tensor], is_init: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One step without branches on the data (what an export captures): ``x`` ``[B, n_agents, F]``,
        ``states`` ``[B, n_agents, layers, hidden]`` each (zeroed where ``is_init`` ``[B, 1]``) ->
        ``(y, next states)``; the same calls of the same ``nn.GRU``/``nn.LSTM`` as the step-by-step mode.
        No size is read off the data (only ``-1`` reshapes), so a traced graph keeps its batch free."""
        n = x.shape[-2]
        states = [torch.where(is_init[..., None, None], 0, s) for s in states]
        cells = [cell.gru if self.kind == "gru" else cell.lstm for cell in self.cells]
        if self.share_params:  # every agent in the cell's batch, as torchrl's module folds them
            agents = [(cells[0], x.flatten(0, 1), [s.flatten(0, 1) for s in states])]
        else:
            agents = [(cell, x[:, i], [s[:, i] for s in states]) for i, cell in enumerate(cells)]
        ys, nexts = [], []
        for cell, xi, si in agents:  # [rows, F], [rows, layers, hidden]
            inner = [s.transpose(0, 1).contiguous() for s in si]
            y, out = cell(xi.unsqueeze(1), inner[0] if self.kind == "gru" else tuple(inner))
            ys.append(y[:, 0])
            nexts.append([o.transpose(0, 1) for o in ([out] if self.kind == "gru" else out)])
        if self.share_params:
            return ys[0].unflatten(0, (-1, n)), [o.unflatten(0, (-1, n)) for o in nexts[0]]
        return torch.stack(ys, 1), [torch.stack([o[j] for o in nexts], 1) for j in range(len(nexts[0]))]


def recurrent_trunk(
    group: GroupSpec,
    inputs: Composite,
    *,
    kind: str,
    role: str,
    hidden: Sequence[int],
    activation: str,
    share_params: bool,
    centralized: bool = False,
    device=None,
    rnn_hidden: int,
) -> Trunk:
    """The ``gru``/``lstm`` model kinds: an MLP over each agent's observation (``hidden``, activated),
    then the GRU/LSTM of ``rnn_hidden`` units.

    Its output is ``[*B, n_agents, rnn_hidden]``; ``role`` (``actor``/``critic``) names the state
    entries. ``centralized`` (MAPPO's critic): the MLP reads all the group's observations.
    """
    g = group.name
    features, out = (g, f"{role}_features"), (g, f"{role}_rnn_out")
    concat, obs_key, width = flat_inputs(group, inputs, kind=kind)
    mlp = agent_mlp(
        group,
        hidden[-1],
        centralized=centralized,
        share_params=share_params,
        hidden=hidden[:-1],
        activation=activation,
        device=device,
        n_inputs=width,
    )
    encoder = TensorOutModule(nn.Sequential(mlp, ACTIVATIONS[activation]()), in_keys=[obs_key], out_keys=[features])
    rnn = MultiAgentRNN(
        kind,
        hidden[-1],
        rnn_hidden,
        n_agents=group.n_agents,
        in_key=features,
        out_key=out,
        state_prefix=(g, role),
        share_params=share_params,
        device=device,
    )
    modules = (encoder, rnn) if concat is None else (concat, encoder, rnn)
    return Trunk(TensorDictSequential(*modules), out, rnn_hidden)


def recurrent_modules(module: nn.Module) -> list[MultiAgentRNN]:
    """Every :class:`MultiAgentRNN` inside ``module`` (a policy, a critic, a router)."""
    return [m for m in module.modules() if isinstance(m, MultiAgentRNN)]


def state_keys(module: nn.Module) -> list:
    """The stored-state entries of the recurrent modules in ``module``, plus ``is_init`` if any."""
    keys = [k for m in recurrent_modules(module) for k in m.state_keys]
    return [*keys, "is_init"] if keys else []


def state_spec(module: nn.Module) -> Composite | None:
    """The per-step specs of the recurrent state entries in ``module`` (``None`` without any; an empty
    spec for a module that only reads ``is_init``)."""
    rnns = recurrent_modules(module)
    if not rnns:  # a module that reads is_init (a pool's episode draws) needs it primed, with no state
        reads = any("is_init" in getattr(m, "in_keys", ()) for m in module.modules())
        return Composite() if reads else None
    spec = Composite()
    for rnn in rnns:
        for key in rnn.state_keys:
            spec[key] = Unbounded(shape=rnn.state_shape)
    return spec


def prime_env(env: EnvBase, spec: Composite | None) -> EnvBase:
    """Adds ``is_init`` and the recurrent state entries (zeros at every reset) to ``env``, in place.

    ``spec`` comes from :func:`state_spec`; ``None`` (no recurrent module) leaves ``env`` as it is.
    """
    if spec is None:
        return env
    env.append_transform(InitTracker())
    if spec.is_empty():
        return env
    # a PettingZoo env also has one reset key per group: the states restart with the whole env
    reset_key = "_reset" if len(env.reset_keys) > 1 and "_reset" in env.reset_keys else None
    env.append_transform(TensorDictPrimer(spec.clone(), default_value=0.0, expand_specs=True, reset_key=reset_key))
    return env
