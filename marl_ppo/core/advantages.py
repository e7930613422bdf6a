"""Advantages per group, one path for every critic: our call of the critic, then torchrl's ``MultiAgentGAE``.

Each group's loss holds a ``MultiAgentGAE`` built without a value network
(:func:`group_estimator`, installed through torchrl's ``make_value_estimator(instance)``); the
values it reads are written first by :func:`critic_values`, one call of each critic on the steps
and one on their next observations. The same path serves a plain MLP critic, a recurrent one
(which must read the hidden states stored at collection: torchrl's own estimator would mark the
next step of every episode start as a start too and reset them) and a critic writing several
groups' values (run once for all of them). :func:`compute_advantages` checks every shape torchrl
would otherwise broadcast silently, masks padding, and folds each batch's value targets into the
group's value normaliser.

>>> import torch
>>> from tensordict import TensorDict
>>> from marl_ppo.groups import GroupKeys
>>> keys = GroupKeys.for_group("g")
>>> gae = group_estimator(keys, gamma=0.5, lmbda=1.0)
>>> td = TensorDict({"g": {"state_value": torch.zeros(1, 2, 1, 1)},
...                  "next": {"g": {"state_value": torch.zeros(1, 2, 1, 1), "train_reward": torch.ones(1, 2, 1, 1),
...                                 "train_done": torch.tensor([[[[False]], [[True]]]]),
...                                 "train_terminated": torch.tensor([[[[False]], [[True]]]])}}}, [1, 2])
>>> gae(td)["g", "advantage"].flatten().tolist()  # 1 + 0.5 * 1, then the terminal step's 1
[1.5, 1.0]
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torchrl.modules import ValueNorm
from torchrl.objectives.value import MultiAgentGAE

from marl_ppo.core.ranks import current
from marl_ppo.groups.specs import GroupKeys, GroupSpec
from marl_ppo.models.critic import update_value_norm

__all__ = [
    "ESTIMATORS",
    "NStepReturns",
    "nstep_returns",
    "group_estimator",
    "critic_values",
    "compute_advantages",
    "check_trailing_one",
    "mask_padding",
    "pass_through_padding",
]


ESTIMATORS = ("gae", "nstep")  # loss.estimator


def nstep_returns(
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    next_value: torch.Tensor,
    *,
    gamma: float | torch.Tensor,
    nstep: int,
    time_dim: int,
) -> torch.Tensor:
    """The n-step return of every step: ``r_t + g r_{t+1} + ... + g^(m-1) r_{t+m-1} + g^m V(s_{t+m})``, where
    ``m <= nstep`` stops at the step that ends the episode or the batch; that step's own next observation
    gives the bootstrap value, none if it terminated. All tensors alike, ``time_dim`` their time.

    Written by hand: torchrl's estimators are GAE, TD(0), TD(1), TD(lambda) and V-trace (its ``MultiStep``
    transform rewrites a replay buffer's transitions, not a rollout's targets).

    >>> r, no = torch.ones(4), torch.zeros(4, dtype=torch.bool)
    >>> nstep_returns(r, no, no, torch.full((4,), 10.0), gamma=0.5, nstep=2, time_dim=0).tolist()
    [4.0, 4.0, 4.0, 6.0]
    """
    steps = reward.shape[time_dim]
    last = torch.zeros_like(done)
    last.narrow(time_dim, steps - 1, 1).fill_(True)
    ends, term = done | last, terminated.to(reward.dtype)

    def ahead(x: torch.Tensor, k: int) -> torch.Tensor:  # x[t + k] along time (its last entry past the end)
        return torch.cat([x.narrow(time_dim, k, steps - k), x.narrow(time_dim, steps - 1, 1).expand_as(x)
                          .narrow(time_dim, 0, k)], time_dim)  # fmt: skip

    out = torch.zeros_like(next_value)
    alive = torch.ones_like(done)
    discount = torch.ones_like(reward)
    for k in range(min(nstep, steps)):
        out = out + torch.where(alive, discount * ahead(reward, k), 0.0)
        stop = alive & (ahead(ends, k) | (k == nstep - 1))
        boot = discount * gamma * (1.0 - ahead(term, k)) * ahead(next_value, k)
        out = out + torch.where(stop, boot, 0.0)
        alive = alive & ~stop
        discount = discount * gamma
    return out


class NStepReturns(MultiAgentGAE):
    """n-step returns (EPyMARL's ``q_nstep``) as a group's value estimator: ``value_target`` the n-step return
    (:func:`nstep_returns`), ``advantage`` it minus the step's value. It reads the values
    :func:`critic_values` wrote and broadcasts a team signal over the agents as ``MultiAgentGAE`` does (its
    base, for that and for its keys); ``lmbda`` is unused."""

    def __init__(self, *, nstep: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.nstep = nstep

    @torch.no_grad()
    def forward(self, tensordict: TensorDictBase, **kwargs) -> TensorDictBase:
        keys = self.tensor_keys
        value, nxt = tensordict.get(keys.value), tensordict.get("next")
        reward, done, terminated = self._prepare_signals(
            nxt.get(keys.reward), nxt.get(keys.done), nxt.get(keys.terminated), value
        )
        target = nstep_returns(
            reward,
            done,
            terminated,
            nxt.get(keys.value),
            gamma=self.gamma.to(value.device),
            nstep=self.nstep,
            time_dim=tensordict.batch_dims - 1,
        )
        tensordict.set(keys.advantage, target - value)
        tensordict.set(keys.value_target, target)
        return tensordict


def group_estimator(
    keys: GroupKeys, *, gamma: float, lmbda: float, estimator: str = "gae", nstep: int = 5
) -> MultiAgentGAE:
    """A group's estimator on its own keys (``estimator``: torchrl's ``MultiAgentGAE``, or :class:`NStepReturns`
    of ``nstep`` steps), reading the values :func:`critic_values` wrote."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator={estimator!r}: expected one of {list(ESTIMATORS)}")
    kwargs = dict(gamma=gamma, lmbda=lmbda, value_network=None)
    out = MultiAgentGAE(**kwargs) if estimator == "gae" else NStepReturns(nstep=nstep, **kwargs)
    out.set_keys(**keys.value_keys(), sample_log_prob=keys.log_prob)
    return out


def critic_values(td: TensorDictBase, critic: TensorDictModule) -> None:
    """Writes the critic's values of the steps and of their next observations into ``td``.

    A recurrent critic runs step by step from the hidden states stored at collection; a critic
    writing several groups' values writes them all.
    """
    nxt = td.get("next")
    for where in (td, nxt):
        out = critic(where.select(*critic.in_keys, strict=False))
        for key in critic.out_keys:
            if not (isinstance(key, tuple) and key[0] == "next"):
                where.set(key, out.get(key))


def check_trailing_one(td: TensorDictBase, group: str, key, what: str) -> None:
    """Refuses ``td[key]`` unless it is ``[*batch, n_agents, 1]`` (without the 1, torchrl would sum
    the log-ratio over agents into one joint ratio, silently)."""
    value = td.get(key)
    expected = (*td.get(group).batch_size, 1)
    if tuple(value.shape) != expected:
        hint = (
            " (it is missing its trailing 1; torchrl would sum the log-ratio over agents)"
            if tuple(value.shape) == expected[:-1]
            else ""
        )
        raise ValueError(
            f"group {group!r}: {what} {key} has shape {list(value.shape)}{hint}; "
            f"expected [*batch, n_agents, 1] = {list(expected)}"
        )


def pass_through_padding(td: TensorDictBase, keys: GroupKeys, gamma: float) -> tuple | None:
    """Values at padding steps (mask False) replaced by what passes GAE straight through them.

    A turn-based game's player does not act on its opponent's turns, and an agent that has left an
    episode does not act again: the critic is never trained there, so its values at those steps are
    noise, and GAE would bootstrap from them (weight ``gamma * (1 - lmbda)`` each). Here each padding
    step's value becomes ``r + gamma * (1 - terminated) * V(next)`` (backwards in time, ``V(next)``
    itself replaced when the next step is padding too): its TD error is 0, and the acting step
    before it bootstraps on the rewards it receives until it acts again and on its value there, as
    a multi-step TD target. The acting steps' values are untouched. Returns the critic's own values
    ``(value, next value)``, for :func:`compute_advantages` to put back once GAE has run (``None``:
    nothing was padding).
    """
    present = td.get(keys.mask).unsqueeze(-1)  # [*B, T, n_agents, 1]
    if bool(present.all()):
        return None
    nxt = td.get("next")
    originals = td.get(keys.value), nxt.get(keys.value)
    time = td.batch_dims - 1
    value, next_value = td.get(keys.value).clone(), nxt.get(keys.value).clone()
    reward, done, term = (nxt.get(k) for k in (keys.reward, keys.done, keys.terminated))
    for t in reversed(range(value.shape[time])):
        step = (slice(None),) * time + (t,)
        if t + 1 < value.shape[time]:  # within a trajectory the next value is the next step's (as replaced)
            later = (slice(None),) * time + (t + 1,)
            next_value[step] = torch.where(done[step], next_value[step], value[later])
        through = reward[step] + gamma * (~term[step]).to(value.dtype) * next_value[step]
        value[step] = torch.where(present[step], value[step], through)
    td.set(keys.value, value)
    nxt.set(keys.value, next_value)
    return originals


def mask_padding(td: TensorDictBase, keys: GroupKeys) -> None:
    """Agents absent at a step (PettingZoo ``mask`` False) get advantage 0 and value target = value.

    Their entries are padding: the loss masks them (``loss_mask_key``), and this keeps them out of
    every other use of the advantages and targets. The mask is ``[*B, T, n_agents]``.
    """
    present = td.get(keys.mask).unsqueeze(-1)
    advantage = td.get(keys.advantage)
    td.set(keys.advantage, torch.where(present, advantage, advantage.new_zeros(())))
    td.set(keys.value_target, torch.where(present, td.get(keys.value_target), td.get(keys.value)))


@torch.no_grad()
def compute_advantages(
    td: TensorDictBase,
    groups: Mapping[str, GroupSpec],
    critics: Mapping[str, TensorDictModule],
    estimators: Mapping[str, MultiAgentGAE],
    value_norms: Mapping[str, tuple[ValueNorm, tuple | None]],
) -> TensorDictBase:
    """Each group's advantage and value target, ``[*B, T, n_agents, 1]``, written into ``td``.

    ``td`` is a rollout with its time dim last in the batch and the routed training reward/done
    present. Groups go in order: critic values (a critic shared by several groups runs once), GAE
    (passing through padding steps: :func:`pass_through_padding`), padding masked, then the group's
    value normaliser takes in the batch's targets (once per batch, after GAE used the values of the
    old statistics).
    """
    called: set[int] = set()
    for g, spec in groups.items():
        keys = spec.keys
        for key in (keys.reward, keys.done, keys.terminated):
            if ("next", *key) not in td.keys(include_nested=True):
                raise KeyError(
                    f"group {g!r}: ('next', {key}) is missing; apply the bound reward table to the "
                    "batch before computing advantages"
                )
            check_trailing_one(td.get("next"), g, key, "training reward/done")
        critic = critics[g]
        if id(critic) not in called:
            critic_values(td, critic)
            called.add(id(critic))
        padded = keys.mask is not None and keys.mask in td.keys(include_nested=True)
        originals = pass_through_padding(td, keys, float(estimators[g].gamma)) if padded else None
        estimators[g](td)
        if originals is not None:  # the entries hold the critic's own values again
            td.set(keys.value, originals[0])
            td.get("next").set(keys.value, originals[1])
        check_trailing_one(td, g, keys.advantage, "advantage")
        present = None
        if keys.mask is not None and keys.mask in td.keys(include_nested=True):
            mask_padding(td, keys)
            present = td.get(keys.mask)
        if g in value_norms:  # on N ranks, every rank's targets: the statistics stay the same on all
            norm, layer = value_norms[g]
            ranks = current()
            targets = ranks.cat(td.get(keys.value_target))
            present = None if present is None else ranks.cat(present)
            update_value_norm(norm, (targets if present is None else targets[present]).reshape(-1, 1), layer)
    return td
