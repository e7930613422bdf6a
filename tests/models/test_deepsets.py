"""The ``deepsets`` model kind: known answers on permutations and masks, and a team critic in a real run.

* the policy's trunk is unchanged when an agent's set elements are permuted, and changes when one
  element changes;
* the centralised critic gives every agent the same value, unchanged when the agents are permuted,
  and an agent masked out (it left the episode) counts for nothing;
* ``model.critic_kind=deepsets`` trains MAPPO on VMAS navigation through ``marl-ppo train``.
"""

from __future__ import annotations

import json

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Unbounded

from marl_ppo.cli import main
from marl_ppo.groups.specs import GroupKeys, GroupSpec, inputs_spec
from marl_ppo.models.critic import build_critic
from marl_ppo.models.registry import MODEL_KINDS

SET, VEC, N = ("g", "others"), ("g", "own"), 3


def _group(masked: bool = False) -> GroupSpec:
    entries = {SET: Unbounded(shape=(N, 5, 4)), VEC: Unbounded(shape=(N, 2))}
    return GroupSpec(
        "g", ("a", "b", "c"), (SET, VEC), Unbounded(shape=(N, 2)), 0, ("g", "reward"),
        observation_spec=inputs_spec(entries, N), keys=GroupKeys.for_group("g", mask=("g", "mask") if masked else None),
    )  # fmt: skip


def _encoder(group, centralized):
    torch.manual_seed(0)
    trunk = MODEL_KINDS["deepsets"].build_trunk(
        group, role="critic", centralized=centralized, share_params=True, hidden=[16, 8], activation="tanh",
        device=None, options={"phi": [8, 6], "pool": "sum"},
    )  # fmt: skip
    return trunk.module.module


def test_the_elements_order_does_not_matter_their_values_do():
    encoder = _encoder(_group(), centralized=False)
    sets, own = torch.randn(7, N, 5, 4), torch.randn(7, N, 2)
    out = encoder(sets, own)
    torch.testing.assert_close(encoder(sets[:, :, torch.tensor([4, 2, 0, 3, 1])], own), out)
    changed = sets.clone()
    changed[:, 1, 3] += 1.0
    moved = encoder(changed, own)
    assert not torch.allclose(moved[:, 1], out[:, 1]) and torch.equal(moved[:, 0], out[:, 0])


def test_the_team_critic_is_the_same_for_any_order_of_the_agents():
    encoder = _encoder(_group(), centralized=True)
    sets, own = torch.randn(7, N, 5, 4), torch.randn(7, N, 2)
    out = encoder(sets, own)
    assert torch.equal(out, out[:, :1].expand_as(out))  # one team value for every agent
    order = torch.tensor([2, 0, 1])
    torch.testing.assert_close(encoder(sets[:, order], own[:, order]), out)


def test_an_agent_masked_out_counts_for_nothing():
    encoder = _encoder(_group(masked=True), centralized=True)
    sets, own = torch.randn(7, N, 5, 4), torch.randn(7, N, 2)
    mask = torch.tensor([True, False, True]).expand(7, N)
    out = encoder(sets, own, mask)
    sets[:, 1], own[:, 1] = 100.0, -100.0  # what the agent that left observes changes nothing
    torch.testing.assert_close(encoder(sets, own, mask), out)
    assert not torch.allclose(encoder(sets, own, torch.ones(7, N, dtype=torch.bool)), out)


def test_a_masked_group_critic_reads_the_mask_entry():
    critic = build_critic(_group(masked=True), centralized=True, kind="deepsets", hidden=[8])
    td = TensorDict(
        {SET: torch.randn(4, N, 5, 4), VEC: torch.randn(4, N, 2), ("g", "mask"): torch.ones(4, N, dtype=torch.bool)},
        [4],
    )
    assert ("g", "mask") in critic.in_keys and critic(td)["g", "state_value"].shape == (4, N, 1)


def test_bad_deepsets_options_are_refused_in_one_line():
    with pytest.raises(
        ValueError, match=r"model.options.deepsets.pool must be one of \['mean', 'sum', 'max'\], got 'median'"
    ):
        MODEL_KINDS["deepsets"].build_trunk(
            _group(), role="actor", centralized=False, share_params=True, hidden=[8], activation="tanh",
            device=None, options={"pool": "median"},
        )  # fmt: skip


def test_a_deepsets_team_critic_trains_mappo_on_vmas(tmp_path, capsys):
    args = [
        "env.num_envs=8", "env.max_steps=20", "train.frames_per_batch=320", "train.total_frames=640",
        "train.minibatch_size=160", "model.hidden=[32]", "model.critic_kind=deepsets",
        "model.options.deepsets.phi=[16]", "log.eval_episodes=2", "log.progress=false", "log.plot=false",
    ]  # fmt: skip
    assert main(["train", *args, f"log.root={tmp_path}", "log.name=ds"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("\n{") + 1 :])["frames"] == 640
    state = torch.load(tmp_path / "ds" / "checkpoints" / "last.pt", weights_only=True)
    assert any("team" in key for key in json.dumps(list(_keys(state))).split('"'))


def _keys(state, prefix=""):
    for key, value in state.items():
        if isinstance(value, dict):
            yield from _keys(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"
