"""torchrl's private loss methods that :mod:`marl_ppo.core.losses` overrides still exist as we override them.

They are private to torchrl: a release may rename them or change their arguments, and an
override of a method that no longer exists is silently never called. This fails first.
"""

from __future__ import annotations

import inspect

import pytest
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss

from marl_ppo.algorithms import ALGORITHMS
from marl_ppo.core.losses import OVERRIDDEN, _PerHeadLoss, per_head_loss


def test_the_algorithms_train_with_torchrls_ppo_losses():
    assert {a.loss_class() for a in ALGORITHMS} == {MAPPOLoss, IPPOLoss, ClipPPOLoss}


@pytest.mark.parametrize("base", [MAPPOLoss, IPPOLoss, ClipPPOLoss], ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_overridden_method_exists_with_our_signature(base, name):
    method = getattr(base, name, None)
    assert method is not None, f"torchrl's {base.__name__} no longer has {name}: our override is dead code"
    params = tuple(p for p in inspect.signature(method).parameters if p != "self")
    assert params == OVERRIDDEN[name], f"{base.__name__}.{name}{params}: we override it as {OVERRIDDEN[name]}"


def test_every_override_is_listed():
    ours = {n for n, v in vars(_PerHeadLoss).items() if callable(v) and n.startswith("_") and not n.startswith("__")}
    assert ours == set(OVERRIDDEN), "list each overridden torchrl method in marl_ppo.core.losses.OVERRIDDEN"
    assert all(issubclass(per_head_loss(a.loss_class()), _PerHeadLoss) for a in ALGORITHMS)


def test_entropy_without_torchrls_finiteness_read_has_torchrls_values():
    """``_get_entropy`` skips torchrl's finiteness check (a host read) for the distributions in
    ``_FINITE_ENTROPY``: it gives torchrl's values for each of them, trained (with a gradient) or logged."""
    import torch
    from torch.distributions import Categorical
    from torchrl.envs.libs.vmas import VmasEnv
    from torchrl.modules.distributions import (
        IndependentNormal,
        MaskedCategorical,
        MaskedOneHotCategorical,
        OneHotCategorical,
    )

    from marl_ppo import read_group_specs
    from marl_ppo.core.losses import _FINITE_ENTROPY
    from marl_ppo.core.router import GroupRouter
    from marl_ppo.models.distributions import MultiCategorical, StableTanhNormal

    groups = read_group_specs(VmasEnv("navigation", num_envs=2, continuous_actions=True, seed=0))
    loss = GroupRouter.from_specs(groups, hidden=(8,)).losses["agents"]
    logits = torch.randn(5, 3, 6, requires_grad=True)
    loc, scale = logits[..., :2], logits[..., 2:4].exp()
    dists = [
        StableTanhNormal(loc, scale, low=-torch.ones(2), high=torch.ones(2), affine=False),
        IndependentNormal(loc, scale),
        MultiCategorical(logits, nvec=[2, 4]),
        OneHotCategorical(logits=logits),
        Categorical(logits=logits),
    ]
    mask = torch.rand(5, 3, 6) > 0.4
    mask[0, 0] = False  # a row without a legal action
    mask[0, 1] = True
    nan = torch.zeros(5, 3, 6)
    nan[1] = float("nan")
    nan_logits = logits + nan  # torchrl's fallback would fire only here, were the entropy not finite
    for cls in (MaskedCategorical, MaskedOneHotCategorical):
        dists += [cls(logits=logits, mask=mask), cls(logits=nan_logits, mask=mask)]
    assert dists[-1].entropy().isfinite().all()
    assert {type(d) for d in dists} == set(_FINITE_ENTROPY)
    for trained in (True, False):
        loss._entropy_trained = trained
        for d in dists:
            ours, theirs = (
                loss._get_entropy(d, torch.Size([5, 3])),
                ClipPPOLoss._get_entropy(loss, d, torch.Size([5, 3])),
            )
            assert torch.equal(ours, theirs.detach() if not trained else theirs), type(d).__name__
            assert ours.requires_grad == trained
