"""torchrl's private loss methods that :mod:`marl_ppo.losses` overrides still exist as we override them.

They are private to torchrl: a release may rename them or change their arguments, and an
override of a method that no longer exists is silently never called. This fails first.
"""
from __future__ import annotations

import inspect

import pytest
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss

from marl_ppo.losses import LOSSES, OVERRIDDEN, _PerHeadLoss


@pytest.mark.parametrize("base", [MAPPOLoss, IPPOLoss, ClipPPOLoss], ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_overridden_method_exists_with_our_signature(base, name):
    method = getattr(base, name, None)
    assert method is not None, f"torchrl's {base.__name__} no longer has {name}: our override is dead code"
    params = tuple(p for p in inspect.signature(method).parameters if p != "self")
    assert params == OVERRIDDEN[name], f"{base.__name__}.{name}{params}: we override it as {OVERRIDDEN[name]}"


def test_every_override_is_listed():
    ours = {n for n, v in vars(_PerHeadLoss).items() if callable(v) and n.startswith("_") and not n.startswith("__")}
    assert ours == set(OVERRIDDEN), "list each overridden torchrl method in marl_ppo.losses.OVERRIDDEN"
    assert all(issubclass(cls, _PerHeadLoss) for cls in LOSSES.values())
