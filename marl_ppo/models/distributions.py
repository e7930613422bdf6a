"""Action distributions: which one each action spec gets, and the two torchrl lacks.

:func:`action_heads` reads a group's action spec into heads, one per named leaf:

=====================================  ==========================================
action spec (per agent)                 distribution
=====================================  ==========================================
``Bounded`` box                         :class:`StableTanhNormal`
``Unbounded`` box                       torchrl ``IndependentNormal`` (``Independent(Normal, 1)``)
``Categorical`` / ``OneHot``            ``Categorical`` / ``OneHotCategorical`` (masked if the env gives a mask)
``MultiCategorical``                    :class:`MultiCategorical`
``Composite`` of named heads            ``CompositeDistribution``, one log-prob per head
=====================================  ==========================================

Written here because torchrl has no such form:

* :class:`StableTanhNormal` -- a ``TanhNormal`` whose ``entropy()`` is deterministic. torchrl's
  ``TanhNormal`` has no closed-form entropy, so PPO falls back to a 1-sample Monte-Carlo
  estimate that moves by about 5% between identical calls. We integrate the change-of-variables
  term with Gauss-Hermite quadrature instead (written by hand: no library offers it).
* :class:`MultiCategorical` -- independent categoricals over several discrete dimensions (VMAS
  ``multidiscrete_actions=True``), one joint log-prob per agent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict.utils import NestedKey
from torch import distributions as D
from torchrl.data import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiOneHot,
    OneHot,
    TensorSpec,
    Unbounded,
)
from torchrl.data import (
    MultiCategorical as MultiCategoricalSpec,
)
from torchrl.modules.distributions import (
    IndependentNormal,
    MaskedCategorical,
    MaskedOneHotCategorical,
    OneHotCategorical,
    TanhNormal,
)
from torchrl.modules.distributions.continuous import (
    SafeTanhTransform,
    _PatchedAffineTransform,
    _PatchedComposeTransform,
)
from torchrl.modules.distributions.utils import safeatanh_noeps

from marl_ppo.groups.specs import GroupSpec

__all__ = ["StableTanhNormal", "MultiCategorical", "Head", "action_heads"]

_GH_POINTS = 16
_gh_x, _gh_w = np.polynomial.hermite.hermgauss(_GH_POINTS)
_GH_NODES = torch.as_tensor(_gh_x * math.sqrt(2.0), dtype=torch.float32)
_GH_WEIGHTS = torch.as_tensor(_gh_w / math.sqrt(math.pi), dtype=torch.float32)
# (loc, scale) -> -2 (loc + scale * node) for every node
_GH_MINUS_2X = torch.stack([torch.full_like(_GH_NODES, -2.0), -2.0 * _GH_NODES])


def _log1m_tanh_sq(x: torch.Tensor) -> torch.Tensor:
    """``log(1 - tanh(x)^2)``, computed without cancellation for large ``|x|``."""
    return 2.0 * (math.log(2.0) - x - torch.nn.functional.softplus(-2.0 * x))


class StableTanhNormal(TanhNormal):
    """``TanhNormal`` with a deterministic entropy, built without reading a tensor on the host.

    For ``Y = m + s * tanh(X)``, ``X ~ Normal(loc, scale)`` per dimension,
    ``H[Y] = H[X] + log s + E[log(1 - tanh(X)^2)]``; the expectation is a 16-point
    Gauss-Hermite quadrature, exact for polynomials of degree 31; against a dense float64 integral
    it is within 1e-5 at the scales policies use (<= 0.3), 5e-4 at scale 1 and 0.1 at scale 3
    (``tests/models/test_distributions.py``). Summed over the event dims like ``log_prob``.

    ``affine``: whether the bounds differ from -1..1, given by :func:`action_heads`, which checks
    ``high > low`` once, on the host, when it reads the action spec. torchrl's ``TanhNormal``
    checks both on every construction (``(high > low).all()``, then ``(high != 1).any()`` and
    ``(low != -1).any()`` in an ``if``): three host reads of device tensors, so three device
    syncs on an accelerator at every collection step and every minibatch. With ``affine`` given,
    construction does what torchrl's does without them; with ``None``, torchrl's checks run.

    >>> import torch
    >>> d = StableTanhNormal(torch.zeros(4, 2), torch.ones(4, 2), low=-torch.ones(2), high=torch.ones(2), affine=False)
    >>> d.entropy().shape, torch.equal(d.entropy(), d.entropy())  # per sample, summed over the 2 dims; deterministic
    (torch.Size([4]), True)
    """

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        upscale: torch.Tensor | float = 5.0,
        low: torch.Tensor | float = -1.0,
        high: torch.Tensor | float = 1.0,
        event_dims: int | None = None,
        tanh_loc: bool = False,
        safe_tanh: bool = True,
        *,
        affine: bool | None = None,
    ) -> None:
        if affine is None or tanh_loc or not isinstance(low, torch.Tensor) or not isinstance(high, torch.Tensor):
            super().__init__(
                loc,
                scale,
                upscale=upscale,
                low=low,
                high=high,
                event_dims=event_dims,
                tanh_loc=tanh_loc,
                safe_tanh=safe_tanh,
            )
            return
        # torchrl 0.14.1's TanhNormal.__init__ from its checks on: the bounds on loc's device,
        # the safe tanh, then the affine map to the bounds when they are not -1..1
        non_blocking = loc.device.type == "cuda"
        high = high if high.device == loc.device else high.to(loc.device, non_blocking=non_blocking)
        low = low if low.device == loc.device else low.to(loc.device, non_blocking=non_blocking)
        self.non_trivial_max = self.non_trivial_min = affine
        self.tanh_loc = False
        self._event_dims = min(1, loc.ndim) if event_dims is None else event_dims
        self.device = loc.device
        self.upscale = upscale if not isinstance(upscale, torch.Tensor) else upscale.to(self.device)
        self.low, self.high = low, high
        t = SafeTanhTransform() if safe_tanh else D.TanhTransform()
        if affine:
            t = _PatchedComposeTransform([t, _PatchedAffineTransform(loc=(high + low) / 2, scale=(high - low) / 2)])
        self._t = t
        self.update(loc, scale)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """``TanhNormal.log_prob`` in closed form: the same maths in a few fused ops.

        torchrl's version walks a chain of distribution transforms (affine, tanh, their Jacobians)
        and costs about twice as much forward and backward; it is on the hot path of every
        minibatch. Same clamp at the boundary as torchrl's safe ``atanh``.
        """
        normal = self.root_dist
        half_range = ((self.high - self.low) / 2).to(value.dtype)
        mid = ((self.high + self.low) / 2).to(value.dtype)
        y = (value - mid) / half_range
        if y.requires_grad:  # torchrl's custom backward: a gradient at the clamped boundary too
            x = safeatanh_noeps(y)
        else:  # an action from the data (PPO): the same values without an autograd.Function call
            lim = 1.0 - torch.finfo(y.dtype).resolution  # safeatanh_noeps's clamp
            x = y.clamp(-lim, lim).atanh()
        per_dim = normal.log_prob(x) - _log1m_tanh_sq(x) - torch.log(half_range)
        if self._event_dims:
            per_dim = per_dim.flatten(-self._event_dims).sum(-1)
        return per_dim

    def entropy(self) -> torch.Tensor:
        normal = self.base_dist.base_dist
        loc, scale = normal.loc, normal.scale
        # E[log(1 - tanh(X)^2)] = sum_i w_i 2 (log 2 - x_i - softplus(-2 x_i)), x_i = loc + scale n_i.
        # The weights sum to 1 and the nodes are symmetric (sum_i w_i n_i = 0), so it is
        # 2 (log 2 - loc - sum_i w_i softplus(-2 x_i)); the -2 x_i of all nodes come from one matmul
        # [..., (loc, scale)] @ [2, 16] instead of broadcast ops (the entropy is logged every minibatch)
        z = torch.stack([loc, scale], -1) @ _GH_MINUS_2X.to(device=loc.device, dtype=loc.dtype)
        weights = _GH_WEIGHTS.to(device=loc.device, dtype=loc.dtype)
        jac = 2.0 * (math.log(2.0) - loc - torch.nn.functional.softplus(z) @ weights)
        half_range = ((self.high - self.low) / 2).to(loc.dtype)
        per_dim = normal.entropy() + jac + torch.log(half_range).expand_as(jac)
        if self._event_dims:
            per_dim = per_dim.flatten(-self._event_dims).sum(-1)
        return per_dim


class MultiCategorical(D.Distribution):
    """Independent categoricals over the last dim's splits: ``logits[..., sum(nvec)]`` -> action ``[..., len(nvec)]``.

    >>> import torch
    >>> d = MultiCategorical(torch.zeros(5, 3 + 2), nvec=[3, 2])
    >>> d.sample().shape, d.log_prob(d.sample()).shape
    (torch.Size([5, 2]), torch.Size([5]))
    >>> round(d.entropy()[0].item(), 4) == round(math.log(3) + math.log(2), 4)
    True
    """

    arg_constraints: dict = {}
    has_rsample = False

    def __init__(self, logits: torch.Tensor, nvec: Sequence[int], validate_args: bool | None = None):
        self.nvec = [int(n) for n in nvec]
        if logits.shape[-1] != sum(self.nvec):
            raise ValueError(
                f"MultiCategorical: logits' last dim is {logits.shape[-1]}, expected sum(nvec)={sum(self.nvec)}"
            )
        self.dists = [D.Categorical(logits=chunk) for chunk in logits.split(self.nvec, dim=-1)]
        super().__init__(logits.shape[:-1], torch.Size([len(self.nvec)]), validate_args=False)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        return torch.stack([d.sample(sample_shape) for d in self.dists], dim=-1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        value = value.long()
        return sum(d.log_prob(value[..., i]) for i, d in enumerate(self.dists))

    def entropy(self) -> torch.Tensor:
        return sum(d.entropy() for d in self.dists)

    @property
    def mode(self) -> torch.Tensor:
        return torch.stack([d.probs.argmax(-1) for d in self.dists], dim=-1)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode


@dataclass(frozen=True)
class Head:
    """One action head: where its action lives, how many network outputs it needs, its distribution."""

    name: tuple[str, ...]  # path inside the group's action ("" path for a plain action)
    n_params: int
    dist_class: type
    dist_kwargs: dict[str, Any]
    param_names: tuple[str, ...]  # "loc", "scale" or "logits"

    @property
    def key(self) -> NestedKey:
        """The head's key inside the action composite (a string for a top-level head)."""
        return self.name[0] if len(self.name) == 1 else self.name

    @property
    def label(self) -> str:
        return "/".join(self.name) if self.name else "action"


def _leaf_head(name: tuple[str, ...], spec: TensorSpec, masked: bool) -> Head:
    # spec is per agent: shape [n_agents, ...]
    where = f"action head {'/'.join(name) or 'action'}"
    if isinstance(spec, (Bounded,)) and spec.domain == "continuous":
        low, high = spec.space.low[0], spec.space.high[0]
        dim = spec.shape[-1]
        # checked here, once, on the host: the distribution then never reads its bounds (see StableTanhNormal)
        if not bool((high > low).all()):
            raise ValueError(
                f"{where}: the action spec's high {high.tolist()} must exceed its low {low.tolist()} in every dimension"
            )
        affine = bool((high != 1.0).any() or (low != -1.0).any())
        return Head(name, 2 * dim, StableTanhNormal, {"low": low, "high": high, "affine": affine}, ("loc", "scale"))
    if isinstance(spec, Unbounded) and spec.domain == "continuous":
        dim = spec.shape[-1]
        return Head(name, 2 * dim, IndependentNormal, {"tanh_loc": False}, ("loc", "scale"))
    # MultiCategorical/MultiOneHot subclass Categorical/OneHot: test them first
    if isinstance(spec, (MultiCategoricalSpec, MultiOneHot)):
        if masked:
            raise NotImplementedError(f"{where}: action masks on multi-discrete actions are not supported")
        if isinstance(spec, MultiOneHot):
            raise NotImplementedError(
                f"{where}: MultiOneHot actions are not supported; ask the env for categorical indices "
                "(VMAS: multidiscrete_actions=True, categorical_actions=True)"
            )
        nvec = [int(n) for n in spec.nvec.reshape(-1, spec.nvec.shape[-1])[0]]
        return Head(name, sum(nvec), MultiCategorical, {"nvec": nvec}, ("logits",))
    if isinstance(spec, OneHot):
        cls = MaskedOneHotCategorical if masked else OneHotCategorical
        return Head(name, spec.shape[-1], cls, {}, ("logits",))
    if isinstance(spec, Categorical):
        if masked:
            return Head(name, spec.space.n, MaskedCategorical, {}, ("logits",))
        return Head(name, spec.space.n, torch.distributions.Categorical, {}, ("logits",))
    if isinstance(spec, Binary):
        raise NotImplementedError(f"{where}: Binary action specs are not supported yet")
    raise NotImplementedError(f"{where}: no policy head for action spec {type(spec).__name__}")


def action_heads(group: GroupSpec) -> list[Head]:
    """The group's action heads, in spec order (one head for a plain tensor action)."""
    spec = group.agent_action_spec
    masked = group.action_mask_key is not None
    if not isinstance(spec, Composite):
        return [_leaf_head((), spec, masked)]
    if masked:
        # a mask the policy cannot apply would let it sample illegal actions: refuse, don't ignore it
        raise NotImplementedError(
            f"group {group.name!r}: the env gives an action mask {group.action_mask_key} but the action is a "
            f"composite of heads {list(spec.keys(True, True))}; action masks work on one categorical action"
        )
    heads = []
    for key in spec.keys(include_nested=True, leaves_only=True):
        key = (key,) if isinstance(key, str) else tuple(key)
        heads.append(_leaf_head(key, spec[key], masked=False))
    return heads
