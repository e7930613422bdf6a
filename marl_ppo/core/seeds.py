"""Many seeds in one process: S routers' parameters stacked along a leading seed dim, one update for all.

:class:`SeedStack` holds the parameters and buffers of S routers built alike (one per seed), each
stacked ``[S, ...]``; a parameter that two paths of a router share (an actor reachable from its loss
and from the router's policy, a critic two groups share) stays one stacked tensor. The router of
the first seed is the *template*: every call puts the stacked tensors into it (tensordict's
``to_module``) and runs it under ``torch.vmap`` over the seed dim, so each seed's losses, advantage
standardisation and diagnostics are its own, computed by torchrl's loss as in a single run (seed by
seed where vmap has no batching rule: composite actions, GRU/LSTM).

:class:`SeedStep` is the single run's :class:`~marl_ppo.core.aggregate.AggregatedStep` per seed: one
backward of the seeds' summed losses (their parameters are disjoint, so each seed's gradient is its
own), each seed's gradient clipped by its own norm, and one fused Adam over the stacked leaves
(Adam is elementwise: its moments are per seed). A seed whose loss is not finite stops there: its
parameters and Adam moments stay as they were before that step, the other seeds go on.

:func:`seeds_update` is :func:`~marl_ppo.core.update.ppo_update` for the stack: each seed draws its
minibatch order from its own generator, exactly as its single run would, so given the same batch
and the same generator state, seed ``s`` ends its update where its single run ends it (to float
rounding: ``tests/core/test_seeds.py``).

Written by hand: torchrl and tensordict have no stacked-seed training; they give the pieces
(``TensorDict.from_module``/``to_module``, ``torch.vmap``, fused Adam), this module ties shared
parameters, keeps each seed's minibatch order, clip and failure its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.modules import MultiAgentNetBase, PopArtValueNorm, set_recurrent_mode

from marl_ppo.core.aggregate import total_loss
from marl_ppo.core.router import GroupRouter
from marl_ppo.core.update import TrainingError, sequence_chunks, update_keys

__all__ = ["SeedStack", "SeedStep", "seeds_update", "clip_per_seed", "seed_refusal"]


def seed_refusal(router: GroupRouter) -> str | None:
    """Why ``router`` cannot be stacked over seeds yet (``None``: it can)."""
    if any(isinstance(m, PopArtValueNorm) for m in router.modules()):
        return "loss.value_norm=popart (the critic's output layer is rescaled through plain tensor references)"
    return None


def _stacked(leaves: Sequence[torch.Tensor]) -> torch.Tensor:
    values = torch.stack([leaf.detach() for leaf in leaves])
    return (
        nn.Parameter(values, requires_grad=leaves[0].requires_grad) if isinstance(leaves[0], nn.Parameter) else values
    )


class SeedStack:
    """The parameters and buffers of ``routers`` (one per seed, built alike), stacked ``[S, ...]``.

    ``routers[0]`` becomes the template the stacked tensors are swapped into; the other routers are
    only read here. :attr:`params` maps every path of the template to its stacked tensor (shared
    paths to the same one), :attr:`trainable` lists each stacked parameter once.
    """

    def __init__(self, routers: Sequence[GroupRouter]) -> None:
        if not routers:
            raise ValueError("a seed stack needs at least one router")
        why = seed_refusal(routers[0])
        if why is not None:
            raise ValueError(f"many seeds in one process do not support {why} yet")
        self.template = routers[0]
        self.seeds = len(routers)
        per_seed = [TensorDict.from_module(r) for r in routers]  # the routers' own tensors, every path
        stacked: dict[int, torch.Tensor] = {}  # id(template tensor) -> its stacked tensor: shared stays shared
        self.params = per_seed[0].empty()
        for key in per_seed[0].keys(include_nested=True, leaves_only=True):
            ident = id(per_seed[0].get(key))
            if ident not in stacked:
                stacked[ident] = _stacked([td.get(key) for td in per_seed])
            self.params.set(key, stacked[ident])
        self.params.batch_size = [self.seeds]
        for name, module in self.template.named_modules(remove_duplicate=False):
            if isinstance(module, MultiAgentNetBase):  # its per-agent TensorDictParams keeps its batch [n_agents]
                self.params.get((*name.split("."), "params")).batch_size = [self.seeds, *module.params.batch_size]
        self.trainable = [t for t in stacked.values() if isinstance(t, nn.Parameter) and t.requires_grad]
        # torch.vmap has no batching rule for a composite action's log-ratio (a TensorDict subtraction,
        # torch._foreach_sub) nor for the GRU/LSTM kernels: such a router's losses run seed by seed
        composite = any(spec.is_composite_action for spec in self.template.groups.values())
        self.looped = composite or bool(self.template.recurrent_keys)
        self._stacked = stacked

    def stacked_of(self, module: nn.Module) -> TensorDictBase:
        """The stacked tensors of a module of the template, ``[S]``: ``stacked_of(m)[s].to_module(m)`` is seed s's."""
        for name, own in self.template.named_modules():
            if own is module:
                return self.params.get(tuple(name.split("."))) if name else self.params
        raise ValueError(f"{type(module).__name__} is not a module of the template router")

    @contextlib.contextmanager
    def seed(self, s: int) -> Iterator[GroupRouter]:
        """The template with seed ``s``'s tensors in it (views: in-place updates, as value-norm statistics, land
        in the stack)."""
        with self.params[s].to_module(self.template):
            yield self.template

    def compute_advantages(self, batch: TensorDictBase) -> TensorDictBase:
        """Each seed's advantages and value targets on its own slice of ``batch`` ``[S, ...]``, with its own critic
        (and value-norm statistics, updated in place)."""
        out = []
        for s in range(self.seeds):
            with torch.no_grad(), self.seed(s) as router:
                out.append(router.compute_advantages(batch[s].clone(False)))
        return torch.stack(out)

    def _losses(self, params: TensorDictBase, td: TensorDictBase) -> TensorDictBase:
        with params.to_module(self.template):
            return self.template(td)

    def __call__(self, minibatch: TensorDictBase) -> TensorDictBase:
        """Every seed's losses and diagnostics on its slice of ``minibatch`` ``[S, M, ...]``: ``[S]`` each."""
        if self.seeds == 1:  # no vmap to pay for (its overhead is a third of a small update)
            return self._losses(self.params[0], minibatch[0]).unsqueeze(0)
        if self.looped:  # one loss call per seed, on its slices of the stack (gradients reach the stack)
            return torch.stack([self._losses(self.params[s], minibatch[s]) for s in range(self.seeds)])
        return torch.vmap(self._losses, (0, 0), randomness="error")(self.params, minibatch)

    def state_dict(self, s: int) -> dict[str, torch.Tensor]:
        """Seed ``s``'s router state dict, as its single run would save it."""
        with self.seed(s) as router:
            return {k: v.detach().clone() for k, v in router.state_dict().items()}

    def load_state_dict(self, s: int, state: Mapping[str, torch.Tensor]) -> None:
        """Writes a router state dict into seed ``s``'s slices (in place)."""
        with torch.no_grad(), self.seed(s) as router:
            router.load_state_dict(state)

    def stacked(self, name: str) -> torch.Tensor:
        """The stacked tensor of the template's parameter or buffer ``name`` (``losses.agents....weight``)."""
        return self.params.get(tuple(name.split(".")))


def clip_per_seed(params: Sequence[torch.Tensor], max_norm: float | None, seeds: int) -> torch.Tensor:
    """Each seed's gradient norm over every leaf's seed slice, ``[S]``; with ``max_norm``, each seed's
    gradients scaled as ``torch.nn.utils.clip_grad_norm_`` scales a single run's.

    >>> w = torch.nn.Parameter(torch.zeros(2, 3))
    >>> w.grad = torch.tensor([[3.0, 4.0, 0.0], [0.3, 0.4, 0.0]])  # seed 0's norm 5, seed 1's 0.5
    >>> clip_per_seed([w], 1.0, 2).tolist()
    [5.0, 0.5]
    >>> [round(g, 4) for g in w.grad.flatten().tolist()]  # seed 0 scaled to norm 1, seed 1 left as it was
    [0.6, 0.8, 0.0, 0.3, 0.4, 0.0]
    """
    grads = [p.grad for p in params if p.grad is not None]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(seeds, -1), dim=1) for g in grads])  # [leaves, S]
    total = torch.linalg.vector_norm(norms, dim=0)
    if max_norm is not None:
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)  # torch's formula, per seed
        for g in grads:
            g.mul_(coef.reshape(seeds, *[1] * (g.ndim - 1)))
    return total


class SeedStep:
    """One backward over every seed's aggregated loss, a per-seed gradient clip, one Adam step for all.

    ``alive[s]`` turns false at seed ``s``'s first non-finite loss; from then on its parameters and
    Adam moments are kept as they were before that step. ``failures[s]`` holds the message.
    """

    def __init__(
        self,
        stack: SeedStack,
        *,
        lr: float = 3e-4,
        max_grad_norm: float | None = 1.0,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        self.stack, self.params, self.seeds = stack, stack.trainable, stack.seeds
        self.max_grad_norm, self.weights = max_grad_norm, dict(weights or {})
        self.optimizer = torch.optim.Adam(self.params, lr=lr, fused=True)  # elementwise: per seed on stacked leaves
        self.alive = torch.ones(self.seeds, dtype=torch.bool)
        self.failures: dict[int, str] = {}

    def __call__(self, losses: TensorDictBase) -> dict[str, torch.Tensor]:
        per_seed = total_loss(losses, self.weights)  # [S]
        finite = torch.isfinite(per_seed).cpu()
        for s in (self.alive & ~finite).nonzero().flatten().tolist():
            self.alive[s] = False
            self.failures[s] = f"non-finite loss at seed index {s}; that seed stops (its last good state is kept)"
        dead = (~self.alive).nonzero().flatten().tolist()
        self.optimizer.zero_grad(set_to_none=True)
        torch.where(finite.to(per_seed.device), per_seed, 0.0).sum().backward()
        kept = self._slices(dead)
        for p in self.params:
            if p.grad is not None and dead:
                p.grad[dead] = 0.0  # a failed seed's NaN stays out of the clip and the step
        grad_norm = clip_per_seed(self.params, self.max_grad_norm, self.seeds)
        self.optimizer.step()
        self._restore(kept)
        return {"loss": per_seed.detach(), "grad_norm": grad_norm.detach()}

    def optimizer_state(self, s: int, names: Sequence[str], single: torch.optim.Optimizer) -> dict:
        """Seed ``s``'s Adam state in the form of ``single``, the optimizer of its single run, whose parameters
        are the template's parameters ``names`` in that order."""
        state = {}
        for i, name in enumerate(names):
            own = self.optimizer.state.get(self.stack.stacked(name))
            if own:
                state[i] = {k: (v if k == "step" else v[s]).clone() for k, v in own.items()}
        groups = [{**g, "lr": self.optimizer.param_groups[0]["lr"]} for g in single.state_dict()["param_groups"]]
        return {"state": state, "param_groups": groups}

    def load_optimizer_states(self, singles: Sequence[torch.optim.Optimizer], names: Sequence[str]) -> None:
        """The Adam state of each seed's single-run optimizer (``singles[s]``, whose parameters are the template's
        ``names`` in that order) stacked into this one: a resumed group continues each seed's moments."""
        index = {id(self.stack.stacked(name)): i for i, name in enumerate(names)}
        state = {}
        for j, p in enumerate(self.params):
            own = [single.state_dict()["state"].get(index[id(p)]) for single in singles]
            if all(own):
                stacked = {k: torch.stack([o[k] for o in own]) for k in own[0] if k != "step"}
                state[j] = {"step": own[0]["step"].clone(), **stacked}
        self.optimizer.load_state_dict({"state": state, "param_groups": self.optimizer.state_dict()["param_groups"]})

    def set_lr(self, lr: float) -> None:
        """The learning rate of every seed's next step (one schedule: the seeds share their config)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _slices(self, dead: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The failed seeds' slices of every parameter and Adam moment, to put back after the step."""
        if not dead:
            return []
        out = []
        for p in self.params:
            state = self.optimizer.state.get(p, {})
            for t in (p, state.get("exp_avg"), state.get("exp_avg_sq")):
                if t is not None:
                    out.append((t, t.detach()[dead].clone()))
        return out

    def _restore(self, kept: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        dead = (~self.alive).nonzero().flatten().tolist()
        with torch.no_grad():
            for t, values in kept:
                t[dead] = values


def seeds_update(
    stack: SeedStack,
    step: SeedStep,
    batch: TensorDictBase,
    *,
    num_epochs: int,
    minibatch_size: int,
    generators: Sequence[torch.Generator],
    seq_len: int | None = None,
) -> TensorDictBase:
    """PPO epochs for every seed at once: ``batch`` ``[S, ...]`` (advantages computed), seed ``s``'s minibatch
    order drawn from ``generators[s]`` as :func:`~marl_ppo.core.update.ppo_update` draws a single run's.
    A recurrent router's samples are each seed's chunks of ``seq_len`` steps (``batch`` ``[S, envs, T]``).

    Returns each seed's diagnostics averaged over its minibatches (``[S]`` entries, ``loss`` and
    ``grad_norm`` too). Raises :class:`~marl_ppo.core.update.TrainingError` only when every seed failed.
    """
    seeds = stack.seeds
    if len(generators) != seeds:
        raise ValueError(f"one generator per seed: {seeds} seeds, {len(generators)} generators")
    selected = batch.select(*update_keys(stack.template))
    recurrent = bool(stack.template.recurrent_keys)
    if recurrent:  # each seed's chunks, as ppo_update cuts a single run's [envs, T]
        if seq_len is None:
            raise ValueError("the router has recurrent modules: seeds_update needs seq_len (model.seq_len)")
        flat = torch.stack([sequence_chunks(selected[s], seq_len) for s in range(seeds)])
        minibatch_size = max(minibatch_size // seq_len, 1)
    else:
        flat = selected.reshape(seeds, -1)
    mode = (lambda: set_recurrent_mode(True)) if recurrent else contextlib.nullcontext
    n = flat.shape[1]
    n_minibatches = max(n // minibatch_size, 1)
    rows = torch.arange(seeds, device=flat.device).unsqueeze(1)
    total, count = None, 0
    for _ in range(num_epochs):
        perms = torch.stack([torch.randperm(n, generator=g) for g in generators]).to(flat.device)
        logged = []
        for i in range(n_minibatches):
            index = perms[:, i * minibatch_size : (i + 1) * minibatch_size]
            with mode():
                losses = stack(flat[rows, index])
            stats = step(losses)
            losses.set("loss", stats["loss"])
            losses.set("grad_norm", stats["grad_norm"])
            logged.append(losses.detach())
        if not bool(step.alive.any()):
            raise TrainingError("; ".join(step.failures.values()))
        epoch_sum = torch.stack(logged).sum(0)
        total = epoch_sum if total is None else total + epoch_sum
        count += len(logged)
    return total.apply(lambda v: v / count)
