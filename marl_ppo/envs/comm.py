"""VMAS communication adapter: hybrid ``{move: box, comm: categorical}`` actions.

VMAS has one global ``continuous_actions`` flag: with it on, a communicating agent's action is one
box ``[move (action_size), comm (dim_c)]``; with it off, movement and message are flattened into a
single categorical. Neither is the natural hybrid action. This transform (on a VMAS env built with
``continuous_actions=True``) exposes every communicating group's action as a composite
``{move: Bounded box, comm: Categorical(dim_c)}`` and packs it back into the vector VMAS expects,
``cat(move, one_hot(comm))``. Silent groups keep their plain action.

>>> from torchrl.envs import TransformedEnv
>>> from torchrl.envs.libs.vmas import VmasEnv
>>> base = VmasEnv("simple_speaker_listener", num_envs=2, continuous_actions=True, seed=0)
>>> env = TransformedEnv(base, CommAdapter.for_env(base))
>>> sorted(env.full_action_spec["speaker", "action"].keys()), env.full_action_spec["listener", "action"].shape
(['comm', 'move'], torch.Size([2, 1, 2]))
>>> td = env.rollout(3)
>>> td["speaker", "action", "comm"].shape, td["speaker", "action", "move"].shape
(torch.Size([2, 3, 1]), torch.Size([2, 3, 1, 2]))
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Categorical, Composite
from torchrl.envs import EnvBase, Transform

__all__ = ["CommAdapter"]


class CommAdapter(Transform):
    """Exposes ``(group, "action")`` as ``{move, comm}`` for each group in ``groups`` and packs it for VMAS.

    Args:
        groups: ``{group: (move_dim, comm_dim)}``.
    """

    def __init__(self, groups: dict[str, tuple[int, int]]) -> None:
        super().__init__(in_keys=[], out_keys=[])
        if not groups:
            raise ValueError("CommAdapter needs at least one communicating group")
        self.comm_groups = dict(groups)

    @classmethod
    def for_env(cls, env: EnvBase) -> "CommAdapter":
        """Finds the communicating groups of a VMAS env (agents that are not ``silent``)."""
        vmas_env = getattr(env, "_env", None)
        if vmas_env is None or not hasattr(vmas_env, "world"):
            raise TypeError(f"CommAdapter.for_env needs a torchrl VmasEnv, got {type(env).__name__}")
        if not env.continuous_actions:
            raise ValueError("the comm adapter needs VMAS with continuous_actions=True (it packs move + one-hot comm)")
        dim_c = vmas_env.world.dim_c
        agents = {a.name: a for a in vmas_env.agents}
        groups = {}
        for group, names in env.group_map.items():
            talkers = [not agents[n].silent for n in names]
            if any(talkers) and not all(talkers):
                raise ValueError(f"group {group!r} mixes silent and communicating agents; cannot adapt")
            if all(talkers) and dim_c > 0:
                groups[group] = (agents[names[0]].action_size, dim_c)
        if not groups:
            raise ValueError(
                f"scenario {getattr(env, 'scenario_name', '?')!r} has no communicating group (dim_c={dim_c}); "
                "set env.comm=false"
            )
        return cls(groups)

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        action_spec = input_spec["full_action_spec"]
        for group, (move_dim, comm_dim) in self.comm_groups.items():
            packed = action_spec[group, "action"]
            if packed.shape[-1] != move_dim + comm_dim:
                raise ValueError(
                    f"group {group!r}: action has {packed.shape[-1]} dims, expected move {move_dim} + comm {comm_dim}"
                )
            batch = packed.shape[:-1]
            move = Bounded(
                low=packed.space.low[..., :move_dim],
                high=packed.space.high[..., :move_dim],
                shape=(*batch, move_dim),
                device=packed.device,
                dtype=packed.dtype,
            )
            comm = Categorical(comm_dim, shape=batch, device=packed.device)
            action_spec[group, "action"] = Composite(move=move, comm=comm, shape=batch, device=packed.device)
        return input_spec

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        # The root was cloned shallowly by Transform.inv: copy each group's sub-tensordict before
        # replacing its composite action, so the caller's data keeps {move, comm}.
        for group, (_, comm_dim) in self.comm_groups.items():
            sub = tensordict.get(group).clone(False)
            action = sub.get("action")
            move, comm = action.get("move"), action.get("comm")
            one_hot = torch.nn.functional.one_hot(comm.long(), comm_dim).to(move.dtype)
            sub.del_("action")
            sub.set("action", torch.cat([move, one_hot], dim=-1))
            tensordict.set(group, sub)
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict
