"""HAPPO's sequential update mode: the groups updated one after another (Kuba et al., ICLR 2022).

Each iteration the groups are put in an order (``order="random"``: drawn from the first
generator, so a resumed run draws the same; ``"fixed"``: the router's order). The first group
runs PPO's epochs on its own policy loss as :func:`~marl_ppo.core.update.ppo_update` runs them;
then, with its policy updated, the joint probability ratio of its actions, ``exp(log pi_new -
log pi_old)`` summed over its agents (and heads), multiplies a per-sample weight ``M`` (1 at the
start). The next group's advantages are multiplied by ``M`` after their standardisation, so its
clipped surrogate is ``M * min(r A, clip(r) A)``; and so on. ``M`` is not clipped (HARL's choice).
The critics are trained once after all the policies (``critic="after"``, HARL's way) on the same
batch and epochs, or each with its policy (``critic="with_actor"``); with one group and
``with_actor`` the update is the joint step, bit for bit.

The units are the groups: a group's agents move together (one unit), whether or not they share
parameters. The guarantee of monotonic improvement assumes the units share no parameters, so a
group playing with another's networks is refused by the config.

>>> from marl_ppo.core.happo import unit_order
>>> import torch
>>> unit_order(["a", "b", "c"], "random", torch.Generator().manual_seed(0))
['c', 'a', 'b']
>>> unit_order(["a", "b", "c"], "fixed", None)
['a', 'b', 'c']
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.modules import set_recurrent_mode

from marl_ppo.core.aggregate import AggregatedStep
from marl_ppo.core.router import GroupRouter
from marl_ppo.core.seeds import SeedStack
from marl_ppo.core.update import ppo_update, sequence_chunks

__all__ = ["happo_update", "unit_order"]

_CRITIC_TERMS = ("loss_critic",)


def unit_order(groups: Sequence[str], order: str, generator: torch.Generator | None) -> list[str]:
    """This iteration's order of the groups: a permutation drawn from ``generator`` or the given order.
    One group draws nothing (its update is then the joint step's, generator state included)."""
    groups = list(groups)
    if order == "fixed" or len(groups) == 1:
        return groups
    if order != "random":
        raise ValueError(f"HAPPO's order must be 'random' or 'fixed', got {order!r}")
    device = generator.device if generator is not None else "cpu"
    return [groups[i] for i in torch.randperm(len(groups), generator=generator, device=device).tolist()]


def _select(losses: TensorDictBase, groups: Sequence[str], names: Sequence[str] | None, skip=()) -> TensorDictBase:
    """The ``loss_*`` entries of ``groups`` that the step should take: ``names`` only, or all but ``skip``."""
    out = {}
    for g in groups:
        own = losses.get(g)
        keep = [k for k in own.keys() if k.startswith("loss_") and (k in names if names else k not in skip)]
        out[g] = own.select(*keep)
    return TensorDict(out, batch_size=losses.batch_size)


def _joint_log_ratio(router: GroupRouter, g: str, batch: TensorDictBase, seq_len: int | None) -> torch.Tensor:
    """``log pi_new - log pi_old`` of group ``g``'s joint action per sample of ``batch`` (its agents summed,
    those masked out counting 0): ``batch``'s shape."""
    spec, loss = router.groups[g], router.losses[g]
    if router.recurrent_keys:  # replayed in chunks from the stored states, as the update does
        chunks = sequence_chunks(batch, seq_len)
        with set_recurrent_mode(True):
            per_agent = loss.log_ratio(chunks).reshape(*batch.shape, -1)
    else:
        per_agent = loss.log_ratio(batch).reshape(*batch.shape, -1)
    mask = batch.get(spec.keys.mask, None) if spec.keys.mask is not None else None
    if mask is not None:
        per_agent = per_agent * mask.reshape(per_agent.shape)
    return per_agent.sum(-1)


def happo_update(
    model: GroupRouter | SeedStack,
    step: AggregatedStep,
    batch: TensorDictBase,
    *,
    num_epochs: int,
    minibatch_size: int,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    seq_len: int | None = None,
    order: str = "random",
    critic: str = "after",
    **kwargs,
) -> TensorDictBase:
    """HAPPO's update on ``batch`` (advantages computed): see the module docstring.

    Takes :func:`~marl_ppo.core.update.ppo_update`'s arguments (passed on to it for each unit) and
    the ``loss.happo`` options ``order`` and ``critic``. Returns each group's diagnostics from its
    own unit (its critic's from the critic pass with ``critic="after"``), and ``loss``/``grad_norm``
    summed/averaged over the passes.
    """
    stack = model if isinstance(model, SeedStack) else SeedStack([model])
    if stack.seeds > 1:
        raise ValueError("HAPPO draws each seed's order of the groups: many seeds in one process are not supported")
    if critic not in ("after", "with_actor"):
        raise ValueError(f"HAPPO's critic must be 'after' or 'with_actor', got {critic!r}")
    router = stack.template
    first = generator[0] if isinstance(generator, Sequence) else generator
    run = dict(num_epochs=num_epochs, minibatch_size=minibatch_size, generator=generator, seq_len=seq_len, **kwargs)
    units = unit_order(list(router.groups), order, first)
    batch = batch.clone(False)  # the weights are this update's, not the collected batch's
    weight = torch.ones(batch.shape, device=batch.device)
    skip = _CRITIC_TERMS if critic == "after" else ()
    out, passes = {}, []
    for i, g in enumerate(units):
        spec = router.groups[g]
        if i:  # the first unit trains as the joint step would: no weight entry at all
            batch.set(
                spec.keys.update_weight, weight.reshape(*batch.shape, 1, 1).expand(*batch.shape, spec.n_agents, 1)
            )
        stats = ppo_update(
            stack, step, batch, groups=[g], terms=lambda losses, g=g: _select(losses, [g], None, skip), **run
        )
        out[g], passes = stats.get(g), [*passes, stats]
        if i < len(units) - 1:
            weight = weight * _joint_log_ratio(router, g, batch, seq_len).exp()
        batch.exclude(spec.keys.update_weight, inplace=True)
    if critic == "after":
        stats = ppo_update(stack, step, batch, terms=lambda losses: _select(losses, units, _CRITIC_TERMS), **run)
        for g in units:
            for name in ("loss_critic", "explained_variance", "value_clip_fraction"):
                if name in stats.get(g).keys():
                    out[g].set(name, stats.get((g, name)))
        passes.append(stats)
    total = TensorDict(out, batch_size=[])
    total.set("loss", torch.stack([p.get("loss") for p in passes]).sum(0))
    total.set("grad_norm", torch.stack([p.get("grad_norm") for p in passes]).mean(0))
    return total
