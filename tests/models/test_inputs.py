"""A group's observation in several entries: the model kinds read them as their concatenation.

Known answer: the policy and the critic (MLP and GRU) built on two entries ``offset`` [2] and
``parcel`` [3] give exactly what the same networks give on one entry holding ``[offset, parcel]``,
and an entry that is not a vector per agent is refused with the group, the key and the shape.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type
from torchrl.data import Categorical, Unbounded

from marl_ppo.groups.specs import GroupSpec, inputs_spec
from marl_ppo.models.actor import build_actor
from marl_ppo.models.critic import build_critic

N, B = 2, 5
SPLIT = (("g", "offset"), ("g", "parcel"))


def _group(split: bool, parcel_shape=(N, 3)) -> GroupSpec:
    if split:
        keys, entries = SPLIT, {SPLIT[0]: Unbounded(shape=(N, 2)), SPLIT[1]: Unbounded(shape=parcel_shape)}
    else:
        keys, entries = (("g", "observation"),), {("g", "observation"): Unbounded(shape=(N, 5))}
    return GroupSpec(
        "g", ("a", "b"), keys, Categorical(4, shape=(1, N)), 1, ("g", "reward"),
        observation_shape=tuple(entries[keys[0]].shape), observation_spec=inputs_spec(entries, N),
    )  # fmt: skip


def _data(whole: torch.Tensor, split: bool) -> TensorDict:
    entries = {SPLIT[0]: whole[..., :2], SPLIT[1]: whole[..., 2:]} if split else {("g", "observation"): whole}
    return TensorDict({**entries, "is_init": torch.ones(B, 1, dtype=torch.bool)}, [B])


@pytest.mark.parametrize("kind", ["mlp", "gru"])
def test_two_observation_entries_read_as_their_concatenation(kind):
    whole = torch.randn(B, N, 5)
    torch.manual_seed(0)
    actor_split, critic_split = (
        build_actor(_group(True), kind=kind, hidden=(8,)),
        build_critic(_group(True), kind=kind, hidden=(8,)),
    )
    torch.manual_seed(0)
    actor_one, critic_one = (
        build_actor(_group(False), kind=kind, hidden=(8,)),
        build_critic(_group(False), kind=kind, hidden=(8,)),
    )
    with set_interaction_type(InteractionType.DETERMINISTIC):
        split, one = actor_split(_data(whole, True)), actor_one(_data(whole, False))
    assert torch.equal(split["g", "logits"], one["g", "logits"])  # same weights, same path: bit for bit
    assert torch.equal(split["g", "action"], one["g", "action"])
    values = critic_split(_data(whole, True))["g", "state_value"], critic_one(_data(whole, False))["g", "state_value"]
    assert values[0].shape == (B, N, 1) and torch.equal(*values)


def test_an_entry_that_is_not_a_vector_is_refused_with_its_key_and_shape():
    group = _group(True, parcel_shape=(N, 3, 4, 4))
    with pytest.raises(
        ValueError,
        match=r"group 'g': model kind 'mlp' reads one flat vector per agent, but "
        r"observation \('g', 'parcel'\) has per-agent shape \[3, 4, 4\]; use model.kind=cnn",
    ):
        build_actor(group)


def test_a_spec_written_by_hand_reads_as_one_float_entry_of_its_shape():
    group = dataclasses.replace(_group(False), observation_spec=None)
    assert group.inputs["g", "observation"].shape == (N, 5) and group.inputs["g"].shape == (N,)
