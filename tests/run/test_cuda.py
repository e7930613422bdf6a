"""Training on CUDA: a tiny VMAS run with the env and the networks on the GPU (skipped without CUDA).

Nothing here checks determinism on CUDA (its kernels need not be); only that the run works and
that the batches, parameters and optimizer state live on the GPU.
"""

from __future__ import annotations

import pytest
import torch
from torchrl.collectors import Collector

from marl_ppo.config import load_config
from marl_ppo.core.update import ppo_update
from marl_ppo.run.build import build, load_policy, train_state
from marl_ppo.run.trainer import Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

TINY = [
    "env.scenario=navigation",
    "env.kwargs.n_agents=2",
    "env.num_envs=8",
    "env.max_steps=10",
    "train.frames_per_batch=160",
    "train.total_frames=320",
    "train.num_epochs=2",
    "train.minibatch_size=40",
    "model.hidden=[32]",
    "log.progress=false",
    "log.plot=false",
    "log.eval_episodes=2",
    "log.eval_every=1",
]


def _cuda(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


def _off_cuda(td) -> list:
    return [k for k, v in td.items(include_nested=True, leaves_only=True) if not _cuda(v)]


def test_collect_and_update_on_cuda():
    cfg = load_config(overrides=[*TINY, "env.device=cuda", "train.device=cuda"])
    parts = build(cfg)
    assert all(_cuda(p) for p in parts.router.parameters())
    collector = Collector(
        parts.env,
        parts.router.policy,
        frames_per_batch=cfg.train.frames_per_batch,
        total_frames=cfg.train.frames_per_batch,
        device=cfg.train.device,
        auto_register_policy_transforms=False,
    )
    try:
        batch = next(iter(collector))
    finally:
        collector.shutdown()
    assert batch.numel() == cfg.train.frames_per_batch
    assert _off_cuda(batch) == []
    batch = parts.reward_table(batch)
    parts.router.compute_advantages(batch)
    assert _cuda(batch.get(("agents", "advantage"))) and _cuda(batch.get(("agents", "value_target")))
    before = [p.detach().clone() for p in parts.router.parameters()]
    step = train_state(cfg, parts).step
    stats = ppo_update(
        parts.router, step, batch, num_epochs=cfg.train.num_epochs, minibatch_size=cfg.train.minibatch_size
    )
    assert torch.isfinite(stats["loss"]).all() and _cuda(stats["loss"])
    after = list(parts.router.parameters())
    assert all(_cuda(p) for p in after)
    assert any(not torch.equal(a, b) for a, b in zip(before, after)), "the update changed nothing"
    for state in step.optimizer.state.values():
        for k, v in state.items():
            if torch.is_tensor(v) and v.ndim:
                assert _cuda(v), f"Adam state {k} on {v.device}"


def test_trainer_fit_on_cuda(tmp_path):
    cfg = load_config(overrides=[*TINY, "env.device=cuda", "train.device=cuda"])
    trainer = Trainer(cfg, run_dir=tmp_path)
    summary = trainer.fit()
    assert summary["iteration"] == 2 and summary["frames"] == 320
    assert "eval/agents/episode_reward" in summary
    assert all(_cuda(p) for p in trainer.parts.router.parameters())
    # a checkpoint written on CUDA loads back
    _, parts = load_policy(tmp_path)
    for a, b in zip(trainer.parts.router.parameters(), parts.router.parameters()):
        assert torch.equal(a.detach().cpu(), b.detach().cpu())


def test_trainer_fit_cpu_env_cuda_networks(tmp_path):
    """VMAS simulated on CPU, networks and update on CUDA: the collector moves the data, and so must
    the evaluation rollout."""
    cfg = load_config(overrides=[*TINY, "env.device=cpu", "train.device=cuda"])
    trainer = Trainer(cfg, run_dir=tmp_path)
    summary = trainer.fit()
    assert summary["frames"] == 320
    assert "eval/agents/episode_reward" in summary
    assert all(_cuda(p) for p in trainer.parts.router.parameters())


def test_four_seeds_in_one_process_on_cuda(tmp_path):
    """``train.seeds=[0,1,2,3]`` with the env and the networks on the GPU: every seed's generator, stacked
    parameters and Adam moments on CUDA, each seed's directory loads back as a single run's."""
    cfg = load_config(
        overrides=[
            *TINY,
            "env.device=cuda",
            "train.device=cuda",
            "train.seeds=[0,1,2,3]",
            f"log.root={tmp_path}",
            "log.name=g",
        ]
    )
    group = Trainer(cfg)
    summaries = group.fit()
    assert [s["frames"] for s in summaries] == [320] * 4
    assert all(g.device.type == "cuda" for g in group.state.generators)
    assert all(_cuda(p) for p in group.state.stack.trainable)
    for state in group.state.step.optimizer.state.values():
        assert all(_cuda(v) for v in state.values() if torch.is_tensor(v) and v.ndim)
    routers = [load_policy(tmp_path / f"g-seed{s}", device="cpu")[1].router.state_dict() for s in range(4)]
    assert any(not torch.equal(routers[0][k], routers[1][k]) for k in routers[0])


IMAGES = [
    "train.total_frames=400",
    "train.frames_per_batch=200",
    "train.minibatch_size=100",
    "train.num_epochs=2",
    "model.hidden=[16]",
    "log.eval_episodes=2",
    "log.eval_every=1",
    "log.progress=false",
    "log.plot=false",
    "train.device=cuda",
]


def test_uint8_images_train_on_cuda(tmp_path):
    """Pistonball's frames stay uint8 on the way to the GPU (the CNN scales them there), and the run
    trains and evaluates with its networks on CUDA."""
    pytest.importorskip("pymunk")
    cfg = load_config(
        "pistonball",
        [*IMAGES, "env.num_envs=2", "env.max_steps=20", "env.kwargs={n_pistons: 3}", "env.image.size=[32, 8]"],
    )
    parts = build(cfg)
    collector = Collector(
        parts.env,
        parts.router.policy,
        frames_per_batch=cfg.train.frames_per_batch,
        total_frames=cfg.train.frames_per_batch,
        device=cfg.train.device,
        auto_register_policy_transforms=False,
    )
    try:
        batch = next(iter(collector))
    finally:
        collector.shutdown()
    obs = batch.get(("piston", "observation"))
    assert obs.dtype == torch.uint8 and _cuda(obs) and obs.shape[-3:] == (32, 8, 3)
    summary = Trainer(cfg, run_dir=tmp_path).fit()
    assert summary["frames"] == 400 and torch.isfinite(torch.tensor(summary["eval/piston/episode_reward"]))


def test_magent2_cnn_against_random_on_cuda(tmp_path):
    """MAgent2's battle (its copies stepped on the CPU by ParallelGames), red's CNN on CUDA, blue a
    random army: the run trains and evaluates against random."""
    pytest.importorskip("magent2")
    cfg = load_config("battle_vs_random", [*IMAGES, "env.kwargs={map_size: 12}", "env.num_envs=2"])
    trainer = Trainer(cfg, run_dir=tmp_path)
    summary = trainer.fit()
    assert summary["frames"] == 400 and "eval/vs_random/blue/episodes" in summary
    assert all(_cuda(p) for p in trainer.parts.router.parameters())


def test_happo_on_cuda(tmp_path):
    """HAPPO (each agent its own weights, updated one after another) with the env and networks on CUDA."""
    cfg = load_config(
        overrides=[*TINY, "env.device=cuda", "train.device=cuda", "loss.algorithm=happo", "model.share_params=false"]
    )
    trainer = Trainer(cfg, run_dir=tmp_path)
    summary = trainer.fit()
    assert summary["frames"] == 320 and "eval/agents/episode_reward" in summary
    assert all(_cuda(p) for p in trainer.parts.router.parameters())


@pytest.mark.parametrize("scenario", ["simple_spread_v3", "tictactoe_v3"])
def test_one_loop_game_copies_hand_their_batch_to_cuda(scenario):
    """ParallelGames and AecGames moved to CUDA (as a collector on CUDA moves them): the games step on
    the CPU, every reset and step batch comes back on the GPU, and reset flags on the GPU are read."""
    from marl_ppo.envs import EnvConfig
    from marl_ppo.envs.game_copies import GameCopies
    from marl_ppo.envs.pettingzoo import make_pettingzoo

    kwargs = {"N": 2} if scenario == "simple_spread_v3" else {}
    env = make_pettingzoo(EnvConfig(kind="pettingzoo", scenario=scenario, kwargs=kwargs), seed=0, num_envs=2)
    base = env.base_env if hasattr(env, "base_env") else env
    assert isinstance(base, GameCopies)
    env = env.to("cuda")
    try:
        td = env.reset()
        assert _off_cuda(td) == []
        td = env.rand_step(td)
        assert _off_cuda(td) == []
        flags = {key: torch.tensor([[True], [False]], device="cuda") for key in ("_reset",)}
        again = env.reset(td.exclude("next").update(flags))
        assert _off_cuda(again) == []
    finally:
        env.close()
