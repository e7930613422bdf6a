"""One conv stack per agent (``model.share_params=false``) for ``cnn`` and chains that start with it.

Known answers on the trunk (no env): changing agent 1's conv weights changes agent 1's output only;
agent 0's loss gives gradients to agent 0's stack only; per-agent stacks (and MLPs) all set to a shared
trunk's weights give the shared trunk's output, for an actor and a centralised critic; a critic on a
batch ``[E, T, n_agents, C, H, W]`` (as advantages read it) gives the values of its rows one by one.

On MAgent2 battle (skipped without the ``magent2`` extra): through ``marl-ppo train battle_vs_random``
under MAPPO, IPPO and HAPPO (and a ``[cnn, gru]`` chain), each agent's stack in the checkpoint, and the
MAPPO run exported in three formats; HAPPO's unit of an agent moves that agent's stack only; two seeds
stacked in one process update as their single runs; a pool's env copies each play their own snapshot.
"""

from __future__ import annotations

import json

import pytest
import torch
from tensordict import TensorDict
from torch import nn
from torchrl.data import Unbounded

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.core import happo
from marl_ppo.core.aggregate import AggregatedStep
from marl_ppo.core.happo import happo_update
from marl_ppo.core.update import ppo_update
from marl_ppo.groups.specs import GroupSpec, inputs_spec
from marl_ppo.models.cnn import AgentConvNet
from marl_ppo.models.critic import build_critic
from marl_ppo.models.mlp import PerAgentMLP, SharedAgentMLP
from marl_ppo.models.registry import MODEL_KINDS

IMAGE = ("g", "pixels")
N = 3  # agents
CNN = {"channels": [4, 6], "kernels": [3, 2], "strides": [1, 2], "paddings": [0, 0]}


def _group(n: int = N) -> GroupSpec:
    entries = {IMAGE: Unbounded(shape=(n, 9, 9, 3), dtype=torch.uint8)}
    return GroupSpec(
        "g", tuple(f"a{i}" for i in range(n)), (IMAGE,), Unbounded(shape=(n, 2)), 0, ("g", "reward"),
        observation_spec=inputs_spec(entries, n),
    )  # fmt: skip


def _encoder(*, share_params: bool, centralized: bool = False) -> nn.Module:
    """The ``cnn`` trunk's network (conv stacks, then the agent MLP of ``hidden=[8, 8]``)."""
    trunk = MODEL_KINDS["cnn"].build_trunk(
        _group(), role="actor", centralized=centralized, share_params=share_params, hidden=[8, 8],
        activation="relu", device=None, options={**MODEL_KINDS["cnn"].options, **CNN},
    )  # fmt: skip
    return trunk.module.module


def _images(*lead: int) -> torch.Tensor:
    return torch.randint(0, 256, (*lead, N, 9, 9, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))


def test_changing_agent_1s_conv_weights_changes_agent_1s_output_only():
    torch.manual_seed(0)
    encoder = _encoder(share_params=False)
    assert len(encoder.conv.stacks) == N
    images = _images(4, 5)  # two batch dims, as the critic reads [envs, time] when it computes advantages
    before = encoder(images)
    with torch.no_grad():
        for p in encoder.conv.stacks[1].parameters():
            p.add_(torch.randn_like(p))
    after = encoder(images)
    assert before.shape == (4, 5, N, 8)
    for i in (0, 2):  # the same code path on the same inputs and weights: bit for bit
        assert torch.equal(after[..., i, :], before[..., i, :]), f"agent {i}'s output moved with agent 1's stack"
    assert not torch.allclose(after[..., 1, :], before[..., 1, :])


def test_agent_0s_loss_gives_gradients_to_agent_0s_stack_only():
    torch.manual_seed(0)
    encoder = _encoder(share_params=False)
    encoder(_images(4, 5))[..., 0, :].square().sum().backward()
    for i, stack in enumerate(encoder.conv.stacks):
        grads = [p.grad for p in stack.parameters()]
        if i == 0:
            assert all(g is not None and bool(g.abs().sum() > 0) for g in grads)
        else:
            assert all(g is None or not bool(g.any()) for g in grads), f"agent 0's loss reached agent {i}'s stack"
    for name, grad in encoder.mlp.params.apply(lambda p: p.grad).items(include_nested=True, leaves_only=True):
        assert bool(grad[0].any()) and not bool(grad[1:].any()), f"agent MLP {name}: other agents' weights have grads"


@pytest.mark.parametrize("centralized", [False, True], ids=["actor", "centralised-critic"])
def test_per_agent_stacks_set_to_the_shared_weights_give_the_shared_output(centralized):
    torch.manual_seed(0)
    shared = _encoder(share_params=True, centralized=centralized)
    own = _encoder(share_params=False, centralized=centralized)
    assert isinstance(shared.mlp, SharedAgentMLP) and isinstance(own.mlp, PerAgentMLP)
    images = _images(4, 5)
    assert not torch.allclose(own(images), shared(images))  # drawn apart: the known answer below could fail
    with torch.no_grad():
        for stack in own.conv.stacks:
            stack.load_state_dict(shared.conv.stacks[0].state_dict())
        for i, layer in enumerate(shared.mlp.net):
            if isinstance(layer, nn.Linear):  # every agent's slice of the stacked weights: the shared layer's
                own.mlp.params[str(i), "weight"].copy_(layer.weight.expand(N, *layer.weight.shape))
                own.mlp.params[str(i), "bias"].copy_(layer.bias.expand(N, *layer.bias.shape))
    # the same maths by two paths (a stack per agent and batched matmuls, one stack over all agents)
    torch.testing.assert_close(own(images), shared(images))


@pytest.mark.parametrize("kind", ["cnn", ["cnn", "mlp"]], ids=["cnn", "cnn-mlp"])
def test_an_unshared_centralised_critic_values_a_batch_of_envs_and_steps_as_its_rows(kind):
    """The bug of issue 52: conv2d refused ``[E, T, C, H, W]`` (agent i's images with two batch dims)."""
    torch.manual_seed(0)
    options = {"cnn": {**MODEL_KINDS["cnn"].options, **CNN}}
    critic = build_critic(_group(), centralized=True, share_params=False, kind=kind, hidden=[8], options=options)
    images = _images(2, 6)
    values = critic(TensorDict({IMAGE: images}, [2, 6]))["g", "state_value"]
    rows = critic(TensorDict({IMAGE: images.reshape(12, *images.shape[2:])}, [12]))["g", "state_value"]
    assert values.shape == (2, 6, N, 1)
    torch.testing.assert_close(values.reshape(12, N, 1), rows)


def test_one_group_without_a_batch_dim_and_a_wrong_agent_count():
    torch.manual_seed(0)
    conv = AgentConvNet(3, 2, share_params=False, **{k: CNN[k] for k in ("kernels", "strides", "paddings")},
                        channels=CNN["channels"], activation_class=nn.ReLU)  # fmt: skip
    images = torch.rand(5, 2, 3, 9, 9)
    torch.testing.assert_close(conv(images[0]), conv(images)[0])
    with pytest.raises(ValueError, match="one conv stack per agent: expected 2 agents' images, got 3"):
        conv(torch.rand(5, 3, 3, 9, 9))


# --- MAgent2 battle ---------------------------------------------------------------------------------------------

TINY = [
    "env.num_envs=1", "env.kwargs.map_size=12", "env.max_steps=5", "train.frames_per_batch=20",
    "train.total_frames=20", "train.minibatch_size=10", "train.num_epochs=1", "train.num_threads=1",
    "model.hidden=[16]", "log.eval_every=0", "log.eval_episodes=2", "log.progress=false", "log.plot=false",
    "model.share_params=false",
]  # fmt: skip
RUNS = {
    "mappo": [],
    "ippo": ["loss.algorithm=ippo"],
    "happo": ["loss.algorithm=happo"],
    "happo-cnn-gru": ["loss.algorithm=happo", "model.kind=[cnn, gru]", "model.rnn_hidden=8"],
}


@pytest.mark.parametrize("case", list(RUNS))
def test_battle_vs_random_trains_one_conv_stack_per_agent(case, tmp_path, capsys):
    pytest.importorskip("magent2")
    run = tmp_path / case
    argv = ["train", "battle_vs_random", *TINY, *RUNS[case], f"log.root={tmp_path}", f"log.name={case}"]
    assert main(argv) == 0, capsys.readouterr().err
    router = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["router"]
    for net in ("actor_network", "critic_network"):
        stacks = {k.split("conv.stacks.")[1].split(".")[0] for k in router if f"red.{net}" in k and "conv.stacks" in k}
        assert stacks == {"0", "1"}, f"red's {net}: conv stacks {sorted(stacks)}, one per agent expected"
    if case != "mappo":
        return
    out = tmp_path / "export"
    args = ["export", str(run), "--format", "onnx", "--format", "torchscript", "--format", "exported"]
    assert main([*args, "--outputs", "params", "--out", str(out)]) == 0, capsys.readouterr().err
    record = json.loads((out / "red" / "policy.json").read_text())
    assert record["inputs"][0]["shape"] == ["batch", 2, 13, 13, 5]
    assert {f: v["max_abs_diff"] <= 1e-5 for f, v in record["files"].items()} == dict.fromkeys(
        ("onnx", "torchscript", "exported"), True
    )


def _battle_runs(overrides: list[str], seeds: int) -> list:
    """Each seed's parts and a batch its policy collected (both armies learn: no opponent)."""
    from marl_ppo.run.build import build
    from tests.opponents.test_opponents import BATTLE

    out = []
    for s in range(seeds):
        parts = build(load_config(None, [*BATTLE, "model.share_params=false", *overrides, f"train.seed={s}"]))
        with torch.no_grad():
            batch = parts.reward_table(parts.env.rollout(8, parts.policy, break_when_any_done=False))
        parts.env.close()
        out.append((parts, batch))
    return out


def _stacks(router, group: str) -> list[list[torch.Tensor]]:
    """Each agent's conv parameters in ``group``'s actor."""
    conv = next(m for m in router.losses[group].actor_network.modules() if isinstance(m, AgentConvNet))
    return [list(stack.parameters()) for stack in conv.stacks]


def test_a_happo_unit_of_one_agent_moves_that_agents_conv_stack_only(monkeypatch):
    pytest.importorskip("magent2")
    ((parts, batch),) = _battle_runs(["loss.algorithm=happo", "loss.happo.order=fixed"], 1)
    router = parts.router
    assert happo.units_of(router) == [("red", 0), ("red", 1), ("blue", 0), ("blue", 1)]
    batch = router.compute_advantages(batch)
    stacks, moved = _stacks(router, "red"), []

    def spy(model, step, batch, **kwargs):
        before = [[p.detach().clone() for p in stack] for stack in stacks]
        out = ppo_update(model, step, batch, **kwargs)
        moved.append([any(not torch.equal(b, p) for b, p in zip(old, new)) for old, new in zip(before, stacks)])
        return out

    monkeypatch.setattr(happo, "ppo_update", spy)
    happo_update(router, AggregatedStep(router, lr=1e-2), batch, num_epochs=2, minibatch_size=8, order="fixed")
    # red 0's unit, red 1's, blue's two, then the critics: red's agents each move their own stack, once
    assert moved == [[True, False], [False, True], [False, False], [False, False], [False, False]]


def test_two_seeds_stacked_update_as_their_single_runs():
    """Known answer of ``tests/core/test_seeds.py`` on unshared conv stacks: the stack's vmapped conv layers
    (a batched weight per seed) end each seed where its single run ends, Adam moments too."""
    pytest.importorskip("magent2")
    from tests.core.test_seeds import _single, _stacked

    runs = _battle_runs([], 2)
    stack, step, _ = _stacked(runs)
    assert not stack.looped  # the vmapped path
    for s, (parts, batch) in enumerate(runs):
        router, single_step, _ = _single(parts, batch, s)
        want, got = router.state_dict(), stack.state_dict(s)
        convs = [k for k in want if "conv.stacks.1." in k]
        assert convs and any(not torch.equal(want[k], parts.router.state_dict()[k]) for k in convs)
        for key, value in want.items():
            torch.testing.assert_close(got[key], value, rtol=0, atol=1e-5, msg=f"seed {s}: {key}")


def test_each_env_copy_of_a_pool_plays_its_own_snapshot_of_unshared_stacks(monkeypatch):
    """``tests/opponents/test_pool_trunks.py``'s known answer, on a CNN whose agents have their own stacks."""
    pytest.importorskip("magent2")
    from tests.opponents import test_pool_trunks as pools

    overrides = [*pools.POOL, "env.num_envs=3", "model.share_params=false"]
    monkeypatch.setitem(pools.KINDS, "cnn-unshared", (None, overrides, "blue", "logits"))
    pools.test_each_env_copy_plays_its_own_snapshot_of_the_policy("cnn-unshared")
