"""Tests for :mod:`marl_ppo.models.distributions`.

* :class:`StableTanhNormal`: ``entropy()`` is deterministic (trap 4: torchrl's ``TanhNormal``
  falls back to a 1-sample Monte-Carlo estimate), has the batch shape (event dims summed like
  ``log_prob``), and agrees with a 200k-sample Monte-Carlo estimate ``-E[log_prob]`` for several
  loc/scale values, including non-unit and per-dimension ``low``/``high`` bounds.
* :class:`MultiCategorical`: ``log_prob`` and ``entropy`` equal the sums of the per-dimension
  ``torch.distributions.Categorical`` values; samples and modes have one index per dimension.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Categorical
from torch.testing import assert_close
from torchrl.modules.distributions import TanhNormal

from marl_ppo.models.distributions import MultiCategorical, StableTanhNormal

# -- StableTanhNormal ------------------------------------------------------------------------------


def test_entropy_is_deterministic():
    loc, scale = torch.randn(4, 3, 2), torch.rand(4, 3, 2) + 0.1
    d = StableTanhNormal(loc, scale)
    first = d.entropy()
    for _ in range(3):
        assert torch.equal(d.entropy(), first)
    # a fresh distribution with the same parameters gives the same entropy
    assert torch.equal(StableTanhNormal(loc.clone(), scale.clone()).entropy(), first)
    assert torch.isfinite(first).all()


@pytest.mark.parametrize("batch, dim", [((), 1), ((4,), 2), ((3, 5), 2), ((2, 3, 4), 6)])
def test_entropy_shape_matches_log_prob(batch, dim):
    d = StableTanhNormal(torch.zeros(*batch, dim), torch.ones(*batch, dim))
    assert d.entropy().shape == torch.Size(batch)
    assert d.log_prob(d.sample()).shape == d.entropy().shape


def test_entropy_sums_event_dims():
    loc = torch.tensor([[0.3, -1.0]])
    scale = torch.tensor([[0.5, 2.0]])
    joint = StableTanhNormal(loc, scale).entropy()
    parts = (
        StableTanhNormal(loc[..., :1], scale[..., :1]).entropy()
        + StableTanhNormal(loc[..., 1:], scale[..., 1:]).entropy()
    )
    assert_close(joint, parts)


@pytest.mark.parametrize(
    "loc, scale, low, high",
    [
        (0.0, 1.0, -1.0, 1.0),
        (0.5, 0.3, -1.0, 1.0),
        (-1.0, 2.0, -1.0, 1.0),
        (0.3, 0.8, -2.0, 3.0),
        (1.5, 1.5, 0.0, 4.0),
        (-0.2, 0.05, -0.5, 0.5),
    ],
)
def test_entropy_matches_monte_carlo(loc, scale, low, high):
    d = StableTanhNormal(torch.tensor([loc]), torch.tensor([scale]), low=low, high=high)
    samples = d.sample((200_000,))
    assert samples.min() >= low and samples.max() <= high
    neg_lp = -d.log_prob(samples)
    mc = neg_lp.mean()
    stderr = neg_lp.std() / math.sqrt(neg_lp.numel())
    assert stderr < 0.005  # the estimate itself is precise enough for the 0.01 check
    assert abs(d.entropy().item() - mc.item()) < 0.01


def test_entropy_matches_monte_carlo_with_per_dim_bounds():
    loc = torch.tensor([0.2, -0.7, 1.0])
    scale = torch.tensor([0.6, 1.2, 0.4])
    low = torch.tensor([-1.0, 0.0, -3.0])
    high = torch.tensor([1.0, 5.0, -1.0])
    d = StableTanhNormal(loc, scale, low=low, high=high)
    samples = d.sample((200_000,))
    assert (samples >= low).all() and (samples <= high).all()
    mc = -d.log_prob(samples).mean()
    assert d.entropy().shape == ()
    assert abs(d.entropy().item() - mc.item()) < 0.01


def test_entropy_shifts_by_log_of_the_half_range():
    loc, scale = torch.tensor([0.4, -0.1]), torch.tensor([0.7, 1.3])
    unit = StableTanhNormal(loc, scale).entropy()
    wide = StableTanhNormal(loc, scale, low=-3.0, high=5.0).entropy()  # half range 4 per dim
    assert_close(wide - unit, torch.tensor(2 * math.log(4.0)))


def test_entropy_gradient_is_finite():
    loc = torch.tensor([[0.0, 3.0], [-8.0, 0.5]], requires_grad=True)
    scale = torch.tensor([[1.0, 0.2], [0.5, 4.0]], requires_grad=True)
    StableTanhNormal(loc, scale).entropy().sum().backward()
    assert torch.isfinite(loc.grad).all() and torch.isfinite(scale.grad).all()
    assert (scale.grad.abs() > 0).all()


@pytest.mark.parametrize("low, high", [(-1.0, 1.0), (-2.0, 3.0), ([-1.0, 0.0], [1.0, 0.5])])
def test_construction_without_host_reads_equals_torchrls(low, high):
    """``affine`` given (as ``action_heads`` gives it): the same transforms, samples, log-probs, deterministic actions
    and entropies as the construction through torchrl's checks (``affine=None``), and the same gradients
    of a reparameterised sample."""
    low, high = torch.as_tensor(low).expand(2), torch.as_tensor(high).expand(2)
    affine = bool((high != 1).any() or (low != -1).any())
    loc = torch.randn(16, 3, 2, generator=torch.Generator().manual_seed(0), requires_grad=True)
    scale = (torch.rand(16, 3, 2, generator=torch.Generator().manual_seed(1)) + 0.05).requires_grad_()
    fast = StableTanhNormal(loc, scale, low=low, high=high, affine=affine)
    checked = StableTanhNormal(loc, scale, low=low, high=high)
    assert [type(t) for t in fast.transforms] == [type(t) for t in checked.transforms]
    assert (
        bool(fast.non_trivial_max or fast.non_trivial_min)
        == bool(checked.non_trivial_max or checked.non_trivial_min)
        == affine
    )
    samples = []
    for d in (fast, checked):
        torch.manual_seed(3)
        samples.append(d.rsample_and_log_prob())
    assert torch.equal(samples[0][0], samples[1][0]) and torch.equal(samples[0][1], samples[1][1])
    g_fast = torch.autograd.grad(samples[0][0].sum() + samples[0][1].sum(), (loc, scale))
    g_checked = torch.autograd.grad(samples[1][0].sum() + samples[1][1].sum(), (loc, scale))
    assert all(torch.equal(a, b) for a, b in zip(g_fast, g_checked))
    value = samples[0][0].detach()
    assert torch.equal(fast.deterministic_sample, checked.deterministic_sample)  # the eval policy's action
    assert torch.equal(fast.log_prob(value), checked.log_prob(value))
    assert torch.equal(fast.entropy(), checked.entropy())


def test_action_heads_refuse_bounds_that_do_not_increase():
    from torchrl.data import Bounded

    from marl_ppo.models.distributions import _leaf_head

    spec = Bounded(low=torch.tensor([[-1.0, 1.0]]), high=torch.tensor([[1.0, 1.0]]), shape=(1, 2))
    with pytest.raises(ValueError, match=r"action head move: the action spec's high \[1.0, 1.0\] must exceed its low"):
        _leaf_head(("move",), spec, masked=False)


# -- MultiCategorical -------------------------------------------------------------------------------

NVEC = [3, 4, 2]


@pytest.mark.parametrize("scale, tol", [(0.05, 1e-5), (0.3, 1e-5), (1.0, 1e-3)])
def test_entropy_matches_a_dense_float64_integral(scale, tol):
    """The quadrature against the integral on a 20 001-point grid in float64 (known answer, no sampling
    noise), for locs out to the saturated tail; at policy scales (<= 0.3) to 1e-5, at 1.0 to 1e-3."""
    loc = torch.linspace(-6.0, 6.0, 25).unsqueeze(-1)
    ours = StableTanhNormal(loc, torch.full_like(loc, scale)).entropy().double()
    u = torch.linspace(-10.0, 10.0, 20001, dtype=torch.float64)
    x = loc.double() + scale * u
    log_jac = 2.0 * (math.log(2.0) - x - torch.nn.functional.softplus(-2.0 * x))
    expected = torch.trapezoid(torch.exp(-(u**2) / 2) / math.sqrt(2 * math.pi) * log_jac, u, dim=-1)
    expected = expected + 0.5 * math.log(2 * math.pi * math.e * scale**2)
    assert (ours - expected).abs().max().item() < tol


@pytest.mark.parametrize("low, high", [(-1.0, 1.0), (-2.0, 3.0), ([-1.0, 0.0], [1.0, 0.5])])
def test_closed_form_log_prob_and_its_gradient_match_torchrl_tanh_normal(low, high):
    # StableTanhNormal.log_prob is the hot-path rewrite of TanhNormal.log_prob: same values, same gradients,
    # also at the boundary where torchrl's safe atanh clamps
    torch.manual_seed(0)
    low, high = torch.as_tensor(low).expand(2), torch.as_tensor(high).expand(2)
    loc = torch.randn(64, 3, 2, requires_grad=True)
    scale = (torch.rand(64, 3, 2) + 0.05).requires_grad_()
    ref = TanhNormal(loc, scale, low=low, high=high)
    value = ref.sample()
    value[0, 0] = high  # on the boundary
    value[1, 0] = low
    ours, theirs = StableTanhNormal(loc, scale, low=low, high=high).log_prob(value), ref.log_prob(value)
    assert ours.shape == theirs.shape == (64, 3)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-4)
    g_ours = torch.autograd.grad(ours.sum(), (loc, scale))
    g_theirs = torch.autograd.grad(theirs.sum(), (loc, scale))
    for a, b in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)


def test_log_prob_of_a_reparameterised_sample_keeps_torchrls_gradient():
    # a value with a gradient (rsample) goes through torchrl's safe atanh and its custom backward;
    # a value from the data (PPO's actions) through a plain clamp + atanh with the same values
    torch.manual_seed(0)
    loc, scale = torch.randn(32, 2, requires_grad=True), (torch.rand(32, 2) + 0.1).requires_grad_()
    ours, ref = StableTanhNormal(loc, scale), TanhNormal(loc, scale)
    value = ref.rsample()
    g_ours = torch.autograd.grad(ours.log_prob(value).sum(), (loc, scale), retain_graph=True)
    g_theirs = torch.autograd.grad(ref.log_prob(value).sum(), (loc, scale))
    for a, b in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ours.log_prob(value.detach()), ours.log_prob(value).detach())


def test_multicategorical_log_prob_is_sum_of_categoricals():
    logits = torch.randn(6, 5, sum(NVEC))
    d = MultiCategorical(logits, NVEC)
    action = d.sample()
    assert action.shape == (6, 5, len(NVEC))
    assert action.dtype == torch.long
    chunks = logits.split(NVEC, dim=-1)
    for i, n in enumerate(NVEC):
        assert ((action[..., i] >= 0) & (action[..., i] < n)).all()
    expected = sum(Categorical(logits=c).log_prob(action[..., i]) for i, c in enumerate(chunks))
    assert d.log_prob(action).shape == (6, 5)
    assert_close(d.log_prob(action), expected)
    # float-typed actions (as stored in a replay buffer) give the same log-prob
    assert_close(d.log_prob(action.float()), expected)


def test_multicategorical_log_prob_of_every_action_sums_to_one():
    logits = torch.randn(2, sum(NVEC))
    d = MultiCategorical(logits, NVEC)
    grid = torch.cartesian_prod(*[torch.arange(n) for n in NVEC])  # [24, 3]
    probs = d.log_prob(grid[:, None, :].expand(-1, 2, -1)).exp()  # [24, 2]
    assert_close(probs.sum(0), torch.ones(2))


def test_multicategorical_entropy_is_sum_of_categoricals():
    logits = torch.randn(6, 5, sum(NVEC))
    d = MultiCategorical(logits, NVEC)
    expected = sum(Categorical(logits=c).entropy() for c in logits.split(NVEC, dim=-1))
    assert d.entropy().shape == (6, 5)
    assert_close(d.entropy(), expected)
    uniform = MultiCategorical(torch.zeros(sum(NVEC)), NVEC).entropy()
    assert_close(uniform, torch.tensor(sum(math.log(n) for n in NVEC)))


def test_multicategorical_mode_and_shape_checks():
    logits = torch.full((sum(NVEC),), -5.0)
    logits[1] = 5.0  # dim 0 -> 1
    logits[3 + 3] = 5.0  # dim 1 -> 3
    logits[3 + 4 + 0] = 5.0  # dim 2 -> 0
    d = MultiCategorical(logits, NVEC)
    assert d.mode.tolist() == [1, 3, 0]
    assert torch.equal(d.deterministic_sample, d.mode)
    assert d.batch_shape == () and d.event_shape == (len(NVEC),)
    with pytest.raises(ValueError, match=r"expected sum\(nvec\)=9"):
        MultiCategorical(torch.zeros(8), NVEC)
