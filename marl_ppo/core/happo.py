"""HAPPO's sequential update mode: the units updated one after another (Kuba et al., ICLR 2022).

The units are the groups whose agents share parameters, and each agent of a group whose agents
have their own (:func:`units_of`; ``model.share_params=false``, as HARL runs HAPPO). Each iteration
the units are put in an order (``order="random"``: drawn from the first generator, so a resumed run
draws the same; ``"fixed"``: the router's order). The first unit runs PPO's epochs on its own policy
loss as :func:`~marl_ppo.core.update.ppo_update` runs them (an agent's unit: its group's loss masked
to that agent, so no other agent's parameters move); then, with its policy updated, the probability
ratio of its joint action, ``exp(log pi_new - log pi_old)`` summed over its agents (and heads),
multiplies a per-sample weight ``M`` (1 at the start). The next unit's advantages are multiplied by
``M`` after their standardisation, so its clipped surrogate is ``M * min(r A, clip(r) A)``; and so
on. ``M`` is not clipped (HARL's choice). The critics are trained once after all the policies
(``critic="after"``, HARL's way) on the same batch and epochs, or each with its policy
(``critic="with_actor"``); with one group whose agents share parameters and ``with_actor`` the
update is the joint step, bit for bit.

Many seeds in one process (a :class:`~marl_ppo.core.seeds.SeedStack`) take ``order="fixed"``: each
unit's pass trains that unit in every seed, each seed weighted by its own ``M``.

The guarantee of monotonic improvement assumes the units share no parameters: a group whose agents
share them is one unit, and a seat that would train another group's networks (``opponents: self``) is
refused by the config. A unit is a unit of this iteration only where its loss keeps a sample of the
batch (:func:`trains_on`): a seat that plays frozen players only (a ``pool:GROUP`` seat with
``pool.latest_share=0``: its loss mask is empty) is never one, takes no pass and adds nothing to ``M``,
and a group's pass never runs on an empty mask (an Adam step on a zero gradient would still move the
weights on their momentum). Groups that play from a source (random, scripted, ``checkpoint:``) are not
in the router at all.

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

__all__ = ["happo_update", "unit_order", "units_of", "trains_on", "SEEDS_NEED_FIXED_ORDER"]

_CRITIC_TERMS = ("loss_critic",)
# many seeds in one process: a pass updates one unit of every seed at once, so the seeds share one order
SEEDS_NEED_FIXED_ORDER = (
    "each seed would draw its own order of the units, but a pass of the update trains the same unit of every "
    "seed; set loss.happo.order=fixed (one order for all seeds) or run the seeds one at a time"
)


def unit_order(units: Sequence, order: str, generator: torch.Generator | None) -> list:
    """This iteration's order of the units: a permutation drawn from ``generator`` or the given order.
    One unit draws nothing (its update is then the joint step's, generator state included)."""
    units = list(units)
    if order == "fixed" or len(units) == 1:
        return units
    if order != "random":
        raise ValueError(f"HAPPO's order must be 'random' or 'fixed', got {order!r}")
    device = generator.device if generator is not None else "cpu"
    return [units[i] for i in torch.randperm(len(units), generator=generator, device=device).tolist()]


def units_of(router: GroupRouter) -> list[tuple[str, int | None]]:
    """The sequential units: ``(group, None)`` for a group whose agents share parameters (or of one agent),
    ``(group, i)`` for each agent ``i`` of a group whose agents have their own (:attr:`GroupRouter.unshared`)."""
    return [
        (g, i) for g, spec in router.groups.items()
        for i in (range(spec.n_agents) if g in router.unshared and spec.n_agents > 1 else [None])
    ]  # fmt: skip


def trains_on(router: GroupRouter, unit: tuple[str, int | None], batch: TensorDictBase) -> bool:
    """Whether ``unit``'s loss keeps any sample of ``batch``: its group's loss mask (the env's mask of the
    agents that act, a pool seat's ``train_mask``) has a true entry, in its agent's slice for an agent's
    unit; a group without a mask always does. One host read per unit and iteration."""
    g, agent = unit
    spec = router.groups[g]
    mask = batch.get(spec.keys.mask, None) if spec.keys.mask is not None else None
    if mask is None:
        return True
    mask = mask.reshape(*batch.shape, spec.n_agents)
    return bool((mask if agent is None else mask[..., agent]).any())


def _select(losses: TensorDictBase, groups: Sequence[str], names: Sequence[str] | None, skip=()) -> TensorDictBase:
    """The ``loss_*`` entries of ``groups`` that the step should take: ``names`` only, or all but ``skip``."""
    out = {}
    for g in groups:
        own = losses.get(g)
        keep = [k for k in own.keys() if k.startswith("loss_") and (k in names if names else k not in skip)]
        out[g] = own.select(*keep)
    return TensorDict(out, batch_size=losses.batch_size)


class _AgentStep:
    """The step of an agent's unit: ``step``, after which every element of the group's parameters that
    got no gradient (the other agents' slices of per-agent weights) gets back its value and its Adam
    moments. One optimizer holds a group's per-agent weights as one tensor; without this, the other
    agents would keep moving on their momentum during this agent's unit."""

    def __init__(self, step: AggregatedStep, params: list[torch.Tensor]) -> None:
        self.step, self.params = step, params
        self.seeds, self.alive, self.stacked = step.seeds, step.alive, step.stacked

    @property
    def failures(self) -> dict[int, str]:
        return self.step.failures

    def __call__(self, losses: TensorDictBase) -> dict[str, torch.Tensor]:
        state = self.step.optimizer.state
        kept = [
            [t.detach().clone() for t in (p, *state.get(p, {}).values()) if t.shape == p.shape] for p in self.params
        ]
        out = self.step(losses)
        with torch.no_grad():
            for p, old in zip(self.params, kept):
                if p.grad is None:
                    continue
                idle = p.grad == 0
                now = [t for t in (p, *state.get(p, {}).values()) if t.shape == p.shape]
                for t, before in zip(now, old):
                    t.copy_(torch.where(idle, before, t))
        return out


def _joint_log_ratio(
    router: GroupRouter, g: str, agent: int | None, batch: TensorDictBase, seq_len: int | None
) -> torch.Tensor:
    """``log pi_new - log pi_old`` of unit ``(g, agent)``'s joint action per sample of ``batch`` (a whole
    group's agents summed, those masked out counting 0): ``batch``'s shape."""
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
    return per_agent.sum(-1) if agent is None else per_agent[..., agent]


def _joint_log_ratios(stack: SeedStack, g: str, agent: int | None, batch: TensorDictBase, seq_len: int | None):
    """:func:`_joint_log_ratio` of each seed of ``stack`` on its slice of ``batch`` ``[S, ...]``."""
    out = []
    for s in range(stack.seeds):
        with stack.seed(s) as router:
            out.append(_joint_log_ratio(router, g, agent, batch[s], seq_len))
    return torch.stack(out)


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
    own unit (averaged over its agents' units; its critic's from the critic pass with
    ``critic="after"``), and ``loss``/``grad_norm`` summed/averaged over the passes. A group none of
    whose units keeps a sample (:func:`trains_on`) has no pass and no diagnostics.
    """
    if not isinstance(model, SeedStack):  # a router: a stack of one seed, its batch given the seed dim
        args = dict(num_epochs=num_epochs, minibatch_size=minibatch_size, generator=generator, seq_len=seq_len)
        one = SeedStack([model])
        return happo_update(one, step, batch.unsqueeze(0), order=order, critic=critic, **args, **kwargs)[0]
    stack = model
    if critic not in ("after", "with_actor"):
        raise ValueError(f"HAPPO's critic must be 'after' or 'with_actor', got {critic!r}")
    router = stack.template
    generators = list(generator) if isinstance(generator, Sequence) else [generator]
    if order != "fixed" and len(generators) > 1 and len(units_of(router)) > 1:  # refused by the config first
        raise ValueError(SEEDS_NEED_FIXED_ORDER)
    first = generators[0]
    run = dict(num_epochs=num_epochs, minibatch_size=minibatch_size, generator=generator, seq_len=seq_len, **kwargs)
    # only the units whose loss keeps a sample: a seat playing frozen players only is never one
    units = unit_order([u for u in units_of(router) if trains_on(router, u, batch)], order, first)
    if not units:  # every loss mask empty (e.g. a pool seat that drew snapshots only): nothing to train
        zero = torch.zeros(stack.seeds, device=batch.device)
        return TensorDict({"loss": zero, "grad_norm": zero.clone()}, batch_size=[stack.seeds])
    trained = [g for g in router.groups if g in {u for u, _ in units}]  # the router's order
    batch = batch.clone(False)  # the weights and masks are this update's, not the collected batch's
    weight = torch.ones(batch.shape, device=batch.device)
    skip = _CRITIC_TERMS if critic == "after" else ()
    out: dict[str, list[TensorDictBase]] = {g: [] for g in trained}
    passes = []
    for i, (g, agent) in enumerate(units):
        keys, n = router.groups[g].keys, router.groups[g].n_agents
        if i:  # the first unit trains as the joint step would: no weight entry at all
            batch.set(keys.update_weight, weight.reshape(*batch.shape, 1, 1).expand(*batch.shape, n, 1))
        unit_step = step
        if agent is not None:  # this agent's terms only; the others' weights stay where they are
            only = torch.zeros(*batch.shape, n, 1, dtype=torch.bool, device=batch.device)
            only[..., agent, :] = True
            batch.set(keys.update_mask, only)
            unit_step = _AgentStep(step, stack.trainable_of(router.losses[g]))
        stats = ppo_update(
            stack, unit_step, batch, groups=[g], terms=lambda losses, g=g: _select(losses, [g], None, skip), **run
        )
        out[g].append(stats.get(g))
        passes.append(stats)
        if i < len(units) - 1:
            weight = weight * _joint_log_ratios(stack, g, agent, batch, seq_len).exp()
        batch.exclude(keys.update_weight, keys.update_mask, inplace=True)
    total = TensorDict({g: torch.stack(stats).mean(0) for g, stats in out.items()}, batch_size=passes[0].batch_size)
    if critic == "after":  # the critics of the groups that trained (every group's: no group subset asked)
        only = None if len(trained) == len(router.groups) else trained
        stats = ppo_update(
            stack, step, batch, groups=only, terms=lambda losses: _select(losses, trained, _CRITIC_TERMS), **run
        )
        for g in trained:
            for name in ("loss_critic", "explained_variance", "value_clip_fraction"):
                if name in stats.get(g).keys():
                    total.set((g, name), stats.get((g, name)))
        passes.append(stats)
    total.set("loss", torch.stack([p.get("loss") for p in passes]).sum(0))
    total.set("grad_norm", torch.stack([p.get("grad_norm") for p in passes]).mean(0))
    return total
