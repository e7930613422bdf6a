"""A masked group's logged diagnostics count the entries its loss counts, not its padding.

torchrl's PPO losses mask only their ``loss_*`` terms; their ``kl_approx``, ``clip_fraction``,
``entropy``, ``ESS``, ratios and explained variance average over padding too. In a tic-tac-toe
pool seat the padding is the other player's turns and the episodes against a random player or a
snapshot, whose stored log-probs are that player's. Known answer: before any gradient step the
trained policy *is* the collecting one on every kept entry, so its KL is 0, its clip fraction 0,
its ratios and its effective sample size 1, whatever the padding holds.
"""

from __future__ import annotations

import pytest
import torch

from marl_ppo.config import load_config
from marl_ppo.core.diagnostics import Reducer
from marl_ppo.run.build import build

TINY = [
    "env.num_envs=4",
    "model.hidden=[16]",
    "pool.latest_share=0.3",
    "pool.fixed_share=0.5",  # half the episodes against a random player: its log-probs in the batch
]


@pytest.fixture(scope="module", params=[False, True], ids=["own-losses", "bundled"])
def batch_and_parts(request):
    torch.manual_seed(0)
    parts = build(load_config("tictactoe", [*TINY, f"loss.bundle_groups={request.param}"]))
    assert bool(parts.router.bundles) == request.param
    with torch.no_grad():
        batch = parts.reward_table(parts.env.rollout(40, parts.policy, break_when_any_done=False))
    parts.router.compute_advantages(batch)
    yield batch, parts
    parts.env.close()


def _new_log_prob_and_entropy(parts, batch, g):
    """The latest policy's log-prob of each stored action and its entropy, by hand (masked categorical)."""
    actor = parts.router.losses[g].actor_network
    with torch.no_grad():
        logits = actor(batch.select(*actor.in_keys).clone())[g, "logits"]
    logp = logits.masked_fill(~batch[g, "action_mask"], -torch.inf).log_softmax(-1)
    p = logp.exp()
    entropy = -(p * logp.clamp_min(-1e30)).sum(-1)
    return logp.gather(-1, batch[g, "action"].unsqueeze(-1)).squeeze(-1), entropy


def test_before_any_step_the_kept_entries_show_no_policy_change(batch_and_parts):
    batch, parts = batch_and_parts
    with torch.no_grad():
        out = parts.router(batch)
    for g in ("player_1", "player_2"):
        kept = batch[g, "train_mask"]
        assert kept.any() and not kept.all()
        assert (batch[g, "opponent"] == -2).any()  # episodes against the random player are in the batch
        new, entropy = _new_log_prob_and_entropy(parts, batch, g)
        log_ratio = new - batch[g, "action_log_prob"]
        # the random player's moves hold a log-prob of another action (the live policy's sample):
        # torchrl's means count them
        random_moves = batch[g, "mask"] & (batch[g, "opponent"] == -2)
        assert (log_ratio.exp() - 1 - log_ratio)[random_moves].mean() > 1e-2
        d = out[g]
        assert d["kl_approx"].abs() < 1e-6, g
        assert d["clip_fraction"] == 0, g
        assert (d["mean_ratio"] - 1).abs() < 1e-5 and (d["max_ratio"] - 1).abs() < 1e-5, g
        assert (d["ESS"] - 1).abs() < 1e-5, g
        torch.testing.assert_close(d["entropy"], entropy[kept].mean(), rtol=1e-5, atol=1e-6)


def test_the_reducer_counts_only_kept_entries_per_group():
    mask = torch.tensor([[True, False, True, True], [False, False, True, False]])
    x = torch.tensor([[1.0, 50.0, 2.0, 4.0], [70.0, 80.0, 6.0, 90.0]])
    two = Reducer(mask, dim=1, k=2)  # groups: columns 0-1 and 2-3
    torch.testing.assert_close(two.mean(x), torch.tensor([1.0, 4.0]))
    torch.testing.assert_close(two.max(x), torch.tensor([1.0, 6.0]))
    lw = torch.log(torch.tensor([[1.0, 9.0, 1.0, 3.0], [9.0, 9.0, 1.0, 9.0]]))
    # Kish: (sum w)^2 / sum w^2 / n -> group 0: one entry (1.0); group 1: w = 1, 3, 1 -> 25 / 11 / 3
    torch.testing.assert_close(two.effective_sample_size(lw), torch.tensor([1.0, 25 / 11 / 3]))
    target = torch.tensor([[1.0, 0.0, 1.0, 3.0], [0.0, 0.0, 2.0, 0.0]])
    value = torch.tensor([[5.0, 5.0, 1.0, 2.0], [5.0, 5.0, 2.0, 5.0]])
    # group 1: targets 1, 3, 2 (variance 2/3), residuals 0, 1, 0 (variance 2/9) -> 1 - 1/3
    torch.testing.assert_close(two.explained_variance(target, value)[1], torch.tensor(2 / 3))


def test_a_group_with_no_kept_entry_gets_zeros_not_nans():
    """A minibatch may hold none of a group's kept entries: its values are 0 (torchrl's masked losses
    give 0 too), never a NaN that would spoil the mean over the iteration's minibatches."""
    mask = torch.tensor([[True, False], [True, False]])
    two = Reducer(mask, dim=1, k=2)  # group 1 (column 1) keeps nothing
    x = torch.tensor([[0.5, 9.0], [0.5, 9.0]])
    for value in (two.mean(x), two.max(x), two.effective_sample_size(x), two.explained_variance(x, x + 1)):
        assert torch.isfinite(value).all() and value[1] == 0
