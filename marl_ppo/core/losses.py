"""torchrl's PPO losses with the few private methods we override, all of them here.

Each group's loss is its algorithm's torchrl loss (``MAPPOLoss``, ``IPPOLoss``, ``ClipPPOLoss``:
:mod:`marl_ppo.algorithms`) with :class:`_PerHeadLoss` mixed in (:func:`per_head_loss`). The methods
it overrides are private to torchrl 0.14.1 and may change in any release; they are rows of the
package's table of private names (:mod:`marl_ppo.upstream`), and ``tests/core/test_losses.py``
checks that each still exists with the signature we override, so that an upgrade fails loudly there
instead of silently here:

* ``_get_entropy(dist, adv_shape)`` -- no graph for an entropy that is only logged;
  records the per-element entropy for bundles;
* ``_log_weight(tensordict, adv_shape)`` -- records the log-weight and KL for bundles;
* ``_get_cur_log_prob(tensordict, params)`` -- records each head's new log-prob (per-head
  diagnostics);
* ``_weighted_loss_entropy(entropy)`` -- per-head, schedulable entropy coefficients;
* ``_standardize_advantage(advantage, tensordict)`` -- on N ranks (:mod:`marl_ppo.core.ranks`), the
  statistics of every rank's minibatch together; on one, torchrl's own;
* ``_reduce_loss(loss, tensordict)`` -- a reduced loss as ``[1]``, which torchrl squeezes back to a
  scalar: the same outside ``torch.vmap``, and under it (many seeds in one process,
  :mod:`marl_ppo.core.seeds`) torchrl's ``squeeze(-1)`` of a 0-dim tensor would fail;
* ``_critic_loss_inputs(target_return, state_value, old_state_value)`` -- records what the
  explained variance compares, for a masked group's diagnostics; and value normalisation: the
  critic loss compares normalised targets and predictions with the statistics of the group's
  :class:`~torchrl.modules.ValueNorm`, which the router updates once per collected batch.
  torchrl's ``MAPPOLoss(value_norm=...)`` updates them on every call of the loss (every
  minibatch of every epoch) and leaves the critic's output in raw units; with ours the critic's
  network itself outputs normalised values (see :class:`~marl_ppo.models.critic.NormalizedValueNet`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import is_tensor_collection
from torchrl.modules.distributions import (
    IndependentNormal,
    MaskedCategorical,
    MaskedOneHotCategorical,
    OneHotCategorical,
)

from marl_ppo.core.ranks import current, standardize
from marl_ppo.models.distributions import MultiCategorical, StableTanhNormal
from marl_ppo.upstream import PRIVATE_NAMES

__all__ = ["per_head_loss", "OVERRIDDEN", "LossRecord"]

# name -> the parameters (after self) of torchrl's method we override: the rows of marl_ppo.upstream's
# table of private names for this file (tests/test_upstream.py checks them against torchrl)
OVERRIDDEN = {
    row.name: row.params for row in PRIVATE_NAMES if row.kind == "override" and row.used_in == "core/losses.py"
}


# closed-form entropies that are finite whenever the distribution's parameters are: our tanh-normal
# (a quadrature of finite terms), the normal (log of a positive scale), categoricals (torchrl's and
# torch's clamp the logits). torchrl's masked categoricals are finite for any logits: their entropy
# fills masked and non-finite logits with the dtype's minimum before normalising (a row with no legal
# action, or NaN logits, gives 0), so torchrl's check of it could never choose its fallback.
_FINITE_ENTROPY = (
    StableTanhNormal,
    IndependentNormal,
    MultiCategorical,
    OneHotCategorical,
    torch.distributions.Categorical,
    MaskedCategorical,
    MaskedOneHotCategorical,
)


@dataclass
class LossRecord:
    """What one call of a group's loss leaves for its caller beyond torchrl's output tensordict.

    The one place a loss keeps anything between torchrl's internal calls and its caller: written
    during ``forward`` by the overridden methods, read and cleared by the caller right after the
    call (:meth:`take`). ``log_prob`` (each head's new log-prob) is recorded for composite actions,
    for the per-head diagnostics; ``log_weight``, ``kl``, ``entropy`` and the critic's compared
    ``value_target`` and ``value`` per element only when the loss was built with
    ``per_element=True`` (a bundle, which reduces them per group; a masked group, whose diagnostics
    count only its kept entries, :mod:`marl_ppo.core.diagnostics`).
    """

    per_element: bool = False
    log_prob: Any = None
    log_weight: torch.Tensor | None = None
    kl: torch.Tensor | None = None
    entropy: Any = None
    value_target: torch.Tensor | None = None
    value: torch.Tensor | None = None

    def take(self) -> "LossRecord":
        """This call's records, cleared here (a kept record would keep its autograd graph)."""
        out = dataclasses.replace(self)
        self.log_prob = self.log_weight = self.kl = self.entropy = self.value_target = self.value = None
        return out


class _PerHeadLoss:
    """Mixed into torchrl's PPO losses: records each head's current log-prob for per-head
    diagnostics, and weights each head's entropy by a schedulable coefficient.

    torchrl's own mapping mode for per-head entropy coefficients keeps a dummy buffer and cannot
    be scheduled, and it needs the full nested ``*_entropy`` key; this takes short head names.

    Everything beyond torchrl's own arguments is given here, at construction:

    * ``head_coeffs``: each head's entropy coefficient, in the order of ``entropy_heads`` (buffer
      ``head_entropy_coeffs``, in the state_dict: the configured values, never changed by a schedule);
    * ``entropy_heads``: a composite action's ``*_entropy`` keys -> their index in ``head_coeffs``;
    * ``value_norm``: the critic's normaliser (value normalisation; held, not registered: it is the
      critic's);
    * ``mask_key``: torchrl's ``loss_mask_key`` (padding entries, e.g. agents that left);
    * ``per_element``: record the per-element log-weight, KL and entropy (see :class:`LossRecord`);
    * ``weight_key``: where a sequential update mode puts a per-sample weight of the advantage
      (HAPPO's M, :mod:`marl_ppo.core.happo`), applied after the advantage's standardisation; a batch
      without that entry trains as torchrl's loss does;
    * ``unit_mask_key``: where a sequential update mode marks the agents of the group it updates
      (HAPPO's units of one agent), a loss mask joined to torchrl's own (``mask_key``).

    A call may scale every entropy coefficient: ``loss(td, entropy_scale=s)`` (the training state's
    schedule value, a 0-dim tensor so that a compiled loss does not recompile as it changes); without
    it the coefficients are as configured.
    """

    def __init__(
        self,
        actor_network,
        critic_network,
        *,
        head_coeffs: Sequence[float],
        entropy_heads: Mapping | None = None,
        value_norm: Any = None,
        mask_key: Any = None,
        per_element: bool = False,
        weight_key: Any = None,
        unit_mask_key: Any = None,
        **kwargs,
    ) -> None:
        super().__init__(actor_network, critic_network, **kwargs)
        self.register_buffer("head_entropy_coeffs", torch.tensor(list(head_coeffs), dtype=torch.float32))
        self._entropy_scale: torch.Tensor | None = None  # this call's, see forward
        self._entropy_trained = any(c != 0.0 for c in head_coeffs)  # else the entropy is only logged
        self._entropy_heads = dict(entropy_heads or {})
        if not self._entropy_heads:
            self.entropy_coeff.fill_(head_coeffs[0])
        object.__setattr__(self, "_value_norm", value_norm)  # the critic's, not a second registration
        self.loss_mask_key = mask_key
        self.record = LossRecord(per_element)
        self.weight_key, self.unit_mask_key = weight_key, unit_mask_key

    def forward(self, tensordict, entropy_scale: torch.Tensor | None = None):
        """torchrl's loss on ``tensordict``, every entropy coefficient times ``entropy_scale`` (if given)."""
        self._entropy_scale = entropy_scale  # read by _weighted_loss_entropy within this call only
        try:
            return super().forward(tensordict)
        finally:
            self._entropy_scale = None

    def _maybe_normalize_advantage(self, advantage, tensordict, *, update_norm):
        advantage = super()._maybe_normalize_advantage(advantage, tensordict, update_norm=update_norm)
        weight = None if self.weight_key is None else tensordict.get(self.weight_key, None)
        return advantage if weight is None else advantage * weight

    def _standardize_advantage(self, advantage, tensordict):
        ranks = current()
        if ranks.world == 1:  # torchrl's own: one process's numbers stay bit for bit
            return super()._standardize_advantage(advantage, tensordict)
        mask = tensordict.get("shifted_valid", default=None)
        return standardize(advantage, mask, self.normalize_advantage_exclude_dims, ranks)

    def _loss_mask_keys(self):
        keys = super()._loss_mask_keys()  # torchrl ANDs every mask it finds among these
        return keys if self.unit_mask_key is None else (*keys, self.unit_mask_key)

    @torch.no_grad()
    def log_ratio(self, tensordict) -> torch.Tensor:
        """``log pi(a|o) - log pi_old(a|o)`` of the stored actions under the current policy, per element
        ``[*B, n_agents, 1]`` (a composite action's heads summed): what HAPPO's M multiplies."""
        adv_shape = tensordict.get(self.tensor_keys.advantage).shape[:-1]
        return super()._log_weight(tensordict, adv_shape)[0]  # torchrl's: nothing recorded

    def _get_entropy(self, dist, adv_shape):
        with contextlib.nullcontext() if self._entropy_trained else torch.no_grad():
            # logged, not trained: no graph, no backward through it (~8% of a step)
            if type(dist) in _FINITE_ENTROPY:
                # torchrl's version also tests the closed-form entropy for non-finite values (to fall
                # back on a Monte-Carlo estimate): a host read, a device sync every minibatch on an
                # accelerator. These distributions' entropies are finite for finite parameters, and
                # non-finite parameters make the loss non-finite, which stops the update.
                entropy = dist.entropy().unsqueeze(-1)
            else:
                entropy = super()._get_entropy(dist, adv_shape)
        if self.record.per_element:
            self.record.entropy = entropy
        return entropy

    def _log_weight(self, tensordict, adv_shape):
        out = super()._log_weight(tensordict, adv_shape)
        if self.record.per_element:
            self.record.log_weight, self.record.kl = out[0], out[2]
        return out

    def _get_cur_log_prob(self, tensordict, params=None):
        log_prob, dist, is_composite = super()._get_cur_log_prob(tensordict, params)
        if params is None and is_composite:
            self.record.log_prob = log_prob
        return log_prob, dist, is_composite

    def _critic_loss_inputs(self, target_return, state_value, old_state_value):
        norm = self._value_norm
        if norm is None:
            out = super()._critic_loss_inputs(target_return, state_value, old_state_value)
        else:
            old = None if old_state_value is None else norm.normalize(old_state_value)
            out = norm.normalize(target_return), norm.normalize(state_value), old
        if self.record.per_element:  # what torchrl's explained variance compares
            self.record.value_target, self.record.value = out[0].detach(), out[1].detach()
        return out

    def _reduce_loss(self, loss, tensordict=None, **kwargs):
        out = super()._reduce_loss(loss, tensordict, **kwargs)
        return out.unsqueeze(-1) if out.ndim == 0 else out  # torchrl squeezes it back (also under vmap)

    def _weighted_loss_entropy(self, entropy):
        scale = self._entropy_scale
        if not is_tensor_collection(entropy):
            return -(self.entropy_coeff if scale is None else self.entropy_coeff * scale) * entropy
        coeffs = self.head_entropy_coeffs if scale is None else self.head_entropy_coeffs * scale
        total = None
        for key, head_entropy in entropy.items(include_nested=True, leaves_only=True):
            term = -coeffs[self._entropy_heads[key]] * head_entropy
            total = term if total is None else total + term
        return total


@functools.cache
def per_head_loss(cls: type) -> type:
    """torchrl's PPO loss class ``cls`` (an algorithm's, :mod:`marl_ppo.algorithms`) with :class:`_PerHeadLoss`
    mixed in: one class per base, named as the base."""
    return type(cls.__name__, (_PerHeadLoss, cls), {"__doc__": cls.__doc__})
