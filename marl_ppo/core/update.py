"""The PPO update: epochs over shuffled minibatches of a collected batch, one aggregated step each.

:func:`ppo_update` is the whole update once a batch has its advantages, for S seeds in one process
(a :class:`~marl_ppo.core.seeds.SeedStack`, its batch ``[S, ...]`` for any S, one included); the
trainer calls it once per iteration, the benchmarks and notebooks call it directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Callable

import torch
from tensordict import TensorDictBase, is_tensor_collection
from torchrl.modules import set_recurrent_mode

from marl_ppo.core.aggregate import AggregatedStep
from marl_ppo.core.router import GroupRouter
from marl_ppo.core.seeds import SeedStack

__all__ = ["ppo_update", "update_keys", "sequence_chunks", "TrainingError", "StopRequested"]


class TrainingError(RuntimeError):
    """A run that cannot go on (e.g. a non-finite loss); the last good checkpoint is kept."""


class StopRequested(Exception):
    """Raised inside the update when a stop signal has arrived (caught by :meth:`~marl_ppo.run.trainer.Trainer.fit`)."""


def update_keys(router: GroupRouter) -> list:
    """The entries the losses read: selecting them first keeps minibatch indexing cheap."""
    keys: set = set()
    for g, loss in router.losses.items():
        spec = router.groups[g]
        keys.update(spec.observation_keys)
        # the critic's entries outside the groups (the env's global state, model.critic_inputs)
        keys.update(k for k in loss.critic_network.in_keys if isinstance(k, str) or len(k) == 1)
        if spec.action_mask_key is not None:
            keys.add(spec.action_mask_key)
        if spec.keys.mask is not None:
            keys.add(spec.keys.mask)
        keys.update([spec.keys.advantage, spec.keys.value_target])
        if loss.clip_value is not None:  # value clipping compares against the collected value
            keys.add(spec.keys.value)
        actions = loss.tensor_keys.action
        log_probs = loss.tensor_keys.sample_log_prob
        for k in [actions] if isinstance(actions, (str, tuple)) else actions:
            keys.add(k)
        for k in [log_probs] if isinstance(log_probs, (str, tuple)) else log_probs:
            keys.add(k)
    keys.update(router.recurrent_keys)
    return sorted(keys, key=str)


def sequence_chunks(batch: TensorDictBase, seq_len: int) -> TensorDictBase:
    """``[envs, T]`` -> ``[envs * T / seq_len, seq_len]``: each env's steps cut into chunks, in time order."""
    if batch.ndim != 2:
        raise ValueError(f"a recurrent update reads a batch [envs, time]; got batch size {list(batch.shape)}")
    envs, steps = batch.shape
    if steps % seq_len:
        raise ValueError(f"model.seq_len={seq_len} does not divide the batch's {steps} steps per env")
    return batch.reshape(envs, steps // seq_len, seq_len).reshape(-1, seq_len)


def ppo_update(
    model: GroupRouter | SeedStack,
    step: AggregatedStep,
    batch: TensorDictBase,
    *,
    num_epochs: int,
    minibatch_size: int,
    check_each_step: bool | None = None,
    should_stop: Callable[[], bool] | None = None,
    seq_len: int | None = None,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    entropy_scale: float | None = None,
    groups: Sequence[str] | None = None,
    terms: Callable[[TensorDictBase], TensorDictBase] | None = None,
) -> TensorDictBase:
    """PPO epochs over shuffled minibatches of ``batch`` (advantages already computed).

    ``model`` is a :class:`~marl_ppo.core.seeds.SeedStack` of S seeds (S = 1 included), whose ``batch``
    is ``[S, ...]`` and whose ``step`` is built with ``seeds=S``; the per-group diagnostics averaged
    over all minibatches, plus ``loss`` and ``grad_norm``, come back ``[S]``. A router is a stack of
    one seed: its batch is given the seed dim and its diagnostics come back without it. A seed whose
    loss is not finite keeps its last good state and stops (see
    :class:`~marl_ppo.core.aggregate.AggregatedStep`); when no seed is alive the update raises
    :class:`TrainingError`, checked after every step on CPU (``check_each_step``, default) and after
    every epoch on an accelerator. ``should_stop`` is asked after every step; when it answers true
    the update stops there (``StopRequested``).

    With a recurrent model (``router.recurrent_keys``), the samples are chunks of ``seq_len``
    consecutive steps of one env (``minibatch_size / seq_len`` chunks a minibatch), replayed in
    torchrl's recurrent mode from the hidden states stored at collection.

    ``generator`` draws the minibatch order (the training state's own, see
    :class:`~marl_ppo.core.state.TrainState`; one per seed, each drawing its seed's order
    on its own device as that seed's single run would); ``None`` draws it from the global torch RNG.

    ``entropy_scale`` scales every head's entropy coefficient in this update (the training state's
    schedule value, :attr:`~marl_ppo.core.state.TrainState.entropy_scale`); ``None``: as configured.

    A sequential update mode (:mod:`marl_ppo.core.happo`) runs this loop per unit: ``groups`` computes
    only those groups' losses, ``terms`` picks the ``loss_*`` terms the step takes from them (default:
    all), and a group's ``update_weight`` and ``update_mask`` entries in ``batch``, if any, weight its
    advantages and mask its loss to some of its agents.
    """
    if not isinstance(model, SeedStack):  # a router: a stack of one seed, its batch given the seed dim
        model, batch = SeedStack([model]), batch.unsqueeze(0)
        return ppo_update(model, step, batch, num_epochs=num_epochs, minibatch_size=minibatch_size,
                          check_each_step=check_each_step, should_stop=should_stop, seq_len=seq_len,
                          generator=generator, entropy_scale=entropy_scale, groups=groups, terms=terms)[0]  # fmt: skip
    stack, seeds = model, model.seeds
    router = stack.template
    generators = list(generator) if isinstance(generator, Sequence) else [generator]
    if len(generators) != seeds:
        raise ValueError(f"one generator per seed: {seeds} seed(s), {len(generators)} generator(s)")
    if step.seeds != seeds:
        raise ValueError(f"the step is built for {step.seeds} seed(s), the model has {seeds}")
    present = batch.keys(include_nested=True)
    unit = [k for s in router.groups.values() for k in (s.keys.update_weight, s.keys.update_mask) if k in present]
    selected = batch.select(*update_keys(router), *unit)
    recurrent = bool(router.recurrent_keys)
    if recurrent:
        if seq_len is None:
            raise ValueError("the router has recurrent modules: ppo_update needs seq_len (model.seq_len)")
        flat = torch.stack([sequence_chunks(selected[s], seq_len) for s in range(seeds)])
        minibatch_size = max(minibatch_size // seq_len, 1)
    else:
        flat = selected.reshape(seeds, -1)
    n = flat.shape[1]  # samples (steps, or chunks of seq_len steps) per seed
    n_minibatches = max(n // minibatch_size, 1)
    mode = (lambda: set_recurrent_mode(True)) if recurrent else contextlib.nullcontext
    # on an accelerator, reading whether a seed is alive each step would make the host wait for the
    # device every minibatch: check once per epoch there (a non-finite epoch is never checkpointed)
    if check_each_step is None:
        check_each_step = all(p.device.type == "cpu" for p in step.params)
    rows = torch.arange(seeds, device=flat.device).unsqueeze(1)
    # a tensor, not a float: a compiled loss would recompile for every new value
    scale = None if entropy_scale is None else torch.tensor(entropy_scale, dtype=torch.float32, device=flat.device)
    total, count = None, 0
    for _ in range(num_epochs):
        perms = torch.stack([_order(n, g, flat.device) for g in generators])  # [S, n]
        logged = []
        for i in range(n_minibatches):
            index = perms[:, i * minibatch_size : (i + 1) * minibatch_size]
            with mode():
                losses = stack(flat[rows, index], scale, groups)
            stats = step(losses if terms is None else terms(losses))
            losses.set("loss", stats["loss"])
            losses.set("grad_norm", stats["grad_norm"])
            logged.append(losses.detach())  # detached: a kept loss keeps its step's autograd graph
            if check_each_step:
                _check_alive(step, logged[-1:])
            if should_stop is not None and should_stop():
                raise StopRequested
        if not check_each_step:
            _check_alive(step, logged)
        # Summed once per epoch: one tensordict op per epoch instead of per minibatch, and no
        # thousands of small tensors kept across the update, which pinned the freed activation
        # memory in the allocator's heap (peak RSS 4.7 GB instead of 0.9 GB at minibatch 4096).
        epoch_sum = torch.stack(logged).sum(0)
        total = epoch_sum if total is None else total + epoch_sum
        count += len(logged)
    # not `total / count`: dividing a TensorDict by an int adds `int` to tensordict's memo of known
    # classes, which a torch.compile guard of the compiled losses watches (one needless recompile)
    return total.apply(lambda v: v / count)


def _check_alive(step: AggregatedStep, logged: Sequence[TensorDictBase]) -> None:
    """One host read: the run fails (:class:`TrainingError`) when no seed is alive, naming the first
    non-finite loss terms of ``logged``."""
    if bool(step.alive.any()):
        return
    bad = next((losses for losses in logged if not torch.isfinite(losses.get("loss")).all()), logged[-1])
    raise TrainingError(_non_finite_message(bad))


def _order(n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """A minibatch order, drawn on the generator's device (the global RNG's: ``device``), moved to ``device``."""
    if generator is None:
        return torch.randperm(n, device=device)
    return torch.randperm(n, device=generator.device, generator=generator).to(device)


def _non_finite_message(losses: TensorDictBase) -> str:
    """The non-finite ``loss_*`` terms of ``losses`` ``[S]``, each with its first non-finite value."""
    bad = [
        f"{g}/{k}={v[~torch.isfinite(v)][0].item()}"
        for g, group_losses in losses.items()
        if is_tensor_collection(group_losses)  # the per-group entries, not the logged total
        for k, v in group_losses.items()
        if k.startswith("loss_") and not torch.isfinite(v).all()
    ]
    return f"non-finite loss: {', '.join(bad) or 'aggregate'}; stopping (the last good checkpoint is kept)"
