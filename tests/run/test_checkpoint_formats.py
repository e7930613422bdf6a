"""Router entries of earlier checkpoint formats: :func:`~marl_ppo.run.checkpoints.load_checkpoint` drops
them, so a checkpoint that holds them loads and resumes while the router itself knows only today's format.

Earlier formats held ``_estimators.<group>.gamma/lmbda`` (a second estimator for recurrent and global
critics, before the one GAE path) and ``losses.<group>.base_head_entropy_coeffs`` (before the entropy
schedule became the training state's value).
"""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from torchrl.data import Bounded

from marl_ppo.config import load_config
from marl_ppo.core.router import GroupRouter
from marl_ppo.groups import GroupSpec
from marl_ppo.run.checkpoints import is_legacy_key, load_checkpoint, write_checkpoint
from marl_ppo.run.resume import network_mismatch
from marl_ppo.run.trainer import Trainer

LEGACY = {
    "_estimators.agents.gamma": torch.tensor(0.99),
    "_estimators.agents.lmbda": torch.tensor(0.9),
    "losses.agents.base_head_entropy_coeffs": torch.tensor([0.01]),
}


def _router() -> GroupRouter:
    spec = GroupSpec(
        name="agents",
        agents=("agent_0", "agent_1"),
        observation_keys=(("agents", "observation"),),
        action_spec=Bounded(-1.0, 1.0, shape=(2, 2)),
        env_batch_ndim=0,
        raw_reward_key=("agents", "reward"),
        observation_shape=(2, 6),
    )
    return GroupRouter.from_specs({"agents": spec}, hidden=(8,))


def test_the_entries_of_earlier_formats_are_dropped_on_load(tmp_path):
    router = _router()
    current = router.state_dict()
    old = OrderedDict(current, **LEGACY)
    old._metadata = current._metadata  # as torch.save keeps a state_dict's
    write_checkpoint({"router": old, "iteration": 1}, [tmp_path / "c.pt"])
    loaded = load_checkpoint(tmp_path / "c.pt")["router"]
    assert list(loaded) == list(current) and all(torch.equal(loaded[k], v) for k, v in current.items())
    assert loaded._metadata == current._metadata  # modules' versions, read by their own loading
    assert all(is_legacy_key(k) for k in LEGACY) and not any(is_legacy_key(k) for k in current)
    assert network_mismatch(router, {"router": old}) is None
    router.load_state_dict(loaded)  # strict: nothing missing, nothing unexpected
    with pytest.raises(RuntimeError, match="Unexpected key"):  # the router knows only today's format
        router.load_state_dict(old)


@pytest.mark.slow
def test_a_checkpoint_holding_them_resumes_as_the_one_without(tmp_path):
    overrides = ["env.num_envs=2", "env.max_steps=10", "env.kwargs.n_agents=2", "train.frames_per_batch=20"]
    overrides += ["train.minibatch_size=10", "train.num_epochs=1", "train.num_threads=1", "model.hidden=[8]"]
    overrides += ["log.progress=false", "log.plot=false", "log.eval_every=0", "log.checkpoint_every=1"]
    runs = [tmp_path / "current", tmp_path / "earlier"]
    for run in runs:
        Trainer(load_config(overrides=[*overrides, "train.total_frames=40"]), run_dir=run).fit()
    path = runs[1] / "checkpoints" / "last.pt"
    state = load_checkpoint(path)
    state["router"].update(LEGACY)
    torch.save(state, path)
    assert set(LEGACY) <= set(torch.load(path, weights_only=True)["router"])
    finals = []
    for run in runs:
        resumed = Trainer(load_config(overrides=[*overrides, "train.total_frames=60"]), run_dir=run, resume=True)
        assert resumed.iteration == 2 and resumed.fit()["iteration"] == 3
        finals.append(load_checkpoint(run / "checkpoints" / "last.pt")["router"])
    assert finals[0].keys() == finals[1].keys() and all(torch.equal(v, finals[1][k]) for k, v in finals[0].items())
