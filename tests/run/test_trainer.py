"""Tests for :mod:`marl_ppo.run.trainer`: learning, determinism, checkpoints and resume, failures, run dirs.

Covered:

* learning on a real VMAS task (navigation, 2 agents): the collected episode return of the last
  iterations rises clearly above the first iteration's (a margin a random policy never reaches);
* train-twice determinism on CPU: identical CSV scalars (losses, returns) and identical parameters;
* resume: a 2-iteration run continued to 4 iterations keeps its counters and all 4 logged steps;
* a simulated kill in the middle of a run keeps ``checkpoints/last.pt`` from the last good
  iteration, the logs and ``error.txt``; resuming continues the counters from there;
* a NaN loss ends with :class:`TrainingError` naming the group and term, the last good checkpoint
  (finite parameters), the logs and ``error.txt`` kept;
* PettingZoo MPE runs (``simple_spread_v3`` from its config file, ``simple_tag_v3`` with two groups
  and a shared team reward) finish and log per-group metrics;
* bad input fails before any training: an unknown VMAS scenario (named, with a suggestion), a
  reward table naming a group the env does not have (named);
* the run directory of a tiny run holds every documented artefact.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torchrl.envs import ParallelEnv

import marl_ppo.core.update as update_mod
import marl_ppo.run.build as build_mod
from marl_ppo import RewardTableError
from marl_ppo.config import ConfigError, from_yaml, load_config
from marl_ppo.core.router import GroupRouter
from marl_ppo.run.logger import read_scalars
from marl_ppo.run.trainer import Trainer, TrainingError

ROOT = Path(__file__).resolve().parents[2]

FPB = 40  # the tiny config's frames per batch (tests/conftest.py: tiny_config)


def last_checkpoint(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)


def steps(scalars: dict, name: str) -> list[int]:
    return [s for s, _ in scalars[name]]


# -- learning -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_learns_vmas_navigation(tmp_path):
    """MAPPO on VMAS navigation with 2 agents, 20 iterations of 1600 frames (~10 s on 2 CPU cores).

    Calibration (seeds 0-4): the first iteration's mean return is in [-0.39, 0.0]; a frozen random
    policy (lr=0) stays within [-0.55, 0.12] over 20 iterations; after training, the mean of the
    last 5 iterations is 1.1-1.35 (seed 0: 1.11 from -0.31).
    """
    cfg = load_config(
        overrides=[
            "env.scenario=navigation",
            "env.kwargs.n_agents=2",
            "env.num_envs=32",
            "env.max_steps=50",
            "train.frames_per_batch=1600",
            "train.total_frames=32000",
            "train.num_epochs=4",
            "train.minibatch_size=400",
            "train.lr=3e-3",
            "train.seed=0",
            "model.hidden=[64,64]",
            "log.eval_every=0",
            "log.eval_episodes=8",
            "log.checkpoint_every=0",
            "log.progress=false",
            "log.plot=false",
        ]
    )
    summary = Trainer(cfg, run_dir=tmp_path / "learn").fit()
    assert summary["iteration"] == 20 and summary["frames"] == 32000
    returns = [v for _, v in read_scalars(tmp_path / "learn")["collect/agents/episode_reward"]]
    assert len(returns) == 20
    first, last5 = returns[0], sum(returns[-5:]) / 5
    assert last5 - first > 0.8, f"no clear learning: first {first:.3f}, last 5 {last5:.3f}, curve {returns}"
    assert last5 > 0.6, f"final return {last5:.3f} is within a random policy's range; curve {returns}"
    # the deterministic evaluation of the trained policy is also well above random
    assert summary["eval/agents/episode_reward"] > 0.6


# -- determinism ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_train_twice_is_deterministic(tmp_path, tiny_config):
    cfg = tiny_config(overrides=["train.num_epochs=2", f"train.minibatch_size={FPB // 2}", "train.seed=3"])
    summaries = [Trainer(cfg, run_dir=tmp_path / name).fit() for name in ("a", "b")]
    a, b = (read_scalars(tmp_path / name) for name in ("a", "b"))
    assert set(a) == set(b)
    compared = [k for k in a if not k.startswith("time/")]
    assert {
        "train/loss",
        "train/agents/loss_objective",
        "train/agents/loss_critic",
        "collect/agents/episode_reward",
        "eval/agents/episode_reward",
    } <= set(compared)
    for key in compared:
        assert a[key] == b[key], key
    assert {k: v for k, v in summaries[0].items() if k != "run_dir"} == {
        k: v for k, v in summaries[1].items() if k != "run_dir"
    }
    pa = last_checkpoint(tmp_path / "a")["router"]
    pb = last_checkpoint(tmp_path / "b")["router"]
    assert pa.keys() == pb.keys()
    for key in pa:
        assert torch.equal(pa[key], pb[key]), key
    # and the parameters did move away from the initialisation of a fresh build
    fresh = build_mod.build(cfg).router.state_dict()
    assert any(not torch.equal(fresh[k], pa[k]) for k in pa if pa[k].is_floating_point())


@pytest.mark.slow
def test_different_seeds_differ(tmp_path, tiny_config):
    """The determinism test above would pass trivially if nothing depended on the seed."""
    for seed in (0, 1):
        Trainer(tiny_config(overrides=[f"train.seed={seed}"]), run_dir=tmp_path / str(seed)).fit()
    a, b = read_scalars(tmp_path / "0"), read_scalars(tmp_path / "1")
    assert a["train/loss"] != b["train/loss"]


# -- resume -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_resume_continues_counters_and_logs(tmp_path, tiny_config):
    run = tmp_path / "run"
    summary = Trainer(tiny_config(), run_dir=run).fit()
    assert summary["iteration"] == 2 and summary["frames"] == 2 * FPB
    state = last_checkpoint(run)
    assert state["iteration"] == 2 and state["frames"] == 2 * FPB

    cfg4 = tiny_config(overrides=[f"train.total_frames={4 * FPB}"])
    resumed = Trainer(cfg4, run_dir=run, resume=True)
    assert resumed.iteration == 2 and resumed.frames == 2 * FPB
    # the parameters come from the checkpoint
    for k, v in resumed.parts.router.state_dict().items():
        assert torch.equal(v, state["router"][k]), k
    summary = resumed.fit()
    assert summary["iteration"] == 4 and summary["frames"] == 4 * FPB
    assert json.loads((run / "summary.json").read_text())["iteration"] == 4
    assert last_checkpoint(run)["iteration"] == 4
    assert (run / "checkpoints" / "iter_00004.pt").exists()

    scalars = read_scalars(run)
    expected = [FPB, 2 * FPB, 3 * FPB, 4 * FPB]
    for name in ("train/loss", "train/agents/loss_objective", "time/iteration"):
        assert steps(scalars, name) == expected, name
    assert [v for _, v in scalars["time/iteration"]] == [1.0, 2.0, 3.0, 4.0]
    # the final evaluations of both sessions are kept
    assert steps(scalars, "eval/agents/episode_reward") == [2 * FPB, 4 * FPB]


def test_resume_of_a_finished_run_does_nothing(tmp_path, tiny_config):
    run = tmp_path / "run"
    Trainer(tiny_config(), run_dir=run).fit()
    before = read_scalars(run)
    summary = Trainer(tiny_config(), run_dir=run, resume=True).fit()
    assert summary["iteration"] == 2 and summary["frames"] == 2 * FPB
    assert read_scalars(run) == before


def test_resume_without_checkpoint_fails(tmp_path, tiny_config):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Trainer(tiny_config(), run_dir=tmp_path / "empty", resume=True)


@pytest.mark.slow
def test_kill_mid_run_keeps_last_good_iteration_and_resumes(tmp_path, dying_update, tiny_config):
    run = tmp_path / "run"
    calls = dying_update(after=2, message="simulated kill during iteration 3")
    cfg4 = tiny_config(overrides=[f"train.total_frames={4 * FPB}"])
    with pytest.raises(RuntimeError, match="simulated kill"):
        Trainer(cfg4, run_dir=run).fit()
    assert calls["n"] == 3

    state = last_checkpoint(run)
    assert state["iteration"] == 2 and state["frames"] == 2 * FPB
    assert not list((run / "checkpoints").glob("*.tmp")), "a checkpoint was left half-written"
    error = (run / "error.txt").read_text()
    assert "RuntimeError: simulated kill during iteration 3" in error
    assert "Traceback" in error
    scalars = read_scalars(run)
    assert steps(scalars, "train/loss") == [FPB, 2 * FPB]
    assert (run / "config.yaml").exists() and (run / "reward_table.txt").exists()
    assert not (run / "summary.json").exists()

    dying_update.disarm()
    resumed = Trainer(cfg4, run_dir=run, resume=True)
    assert (resumed.iteration, resumed.frames) == (2, 2 * FPB)
    summary = resumed.fit()
    assert summary["iteration"] == 4 and summary["frames"] == 4 * FPB
    scalars = read_scalars(run)
    assert steps(scalars, "train/loss") == [FPB, 2 * FPB, 3 * FPB, 4 * FPB]
    assert [v for _, v in scalars["time/iteration"]] == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.slow
def test_resume_restores_optimizer_and_lr_schedule(tmp_path, dying_update, tiny_config):
    run = tmp_path / "run"
    cfg = tiny_config(overrides=["train.lr_schedule=linear", "train.lr=1e-3", f"train.total_frames={4 * FPB}"])
    dying_update(after=2)
    with pytest.raises(RuntimeError):
        Trainer(cfg, run_dir=run).fit()
    dying_update.disarm()
    state = last_checkpoint(run)
    resumed = Trainer(cfg, run_dir=run, resume=True)
    # linear decay over 4 iterations: after 2 of them the lr is half
    assert resumed.scheduler.get_last_lr()[0] == pytest.approx(0.5e-3)
    opt_state = resumed.state.step.optimizer.state_dict()["state"]
    assert opt_state and all(int(s["step"]) == 2 for s in opt_state.values())
    for k, v in opt_state.items():
        assert torch.equal(v["exp_avg"], state["optimizer"]["state"][k]["exp_avg"])
    resumed.fit()
    assert resumed.scheduler.get_last_lr()[0] == pytest.approx(0.0)
    assert len(read_scalars(run)["train/lr"]) == 4


def test_logged_lr_is_the_lr_of_the_update(tmp_path, monkeypatch, tiny_config):
    """``train/lr`` sits next to the losses of the same update, so it is the lr that update used:
    a linear schedule over 4 iterations from 1e-3 runs its updates at 1e-3, 0.75e-3, 0.5e-3, 0.25e-3."""
    run = tmp_path / "run"
    cfg = tiny_config(overrides=["train.lr_schedule=linear", "train.lr=1e-3", f"train.total_frames={4 * FPB}"])
    used = []
    real_update = update_mod.ppo_update  # the joint update mode, looked up by the trainer each iteration

    def recording_update(router, step, *args, **kwargs):
        used.append(step.optimizer.param_groups[0]["lr"])
        return real_update(router, step, *args, **kwargs)

    monkeypatch.setattr(update_mod, "ppo_update", recording_update)
    Trainer(cfg, run_dir=run).fit()
    assert used == pytest.approx([1e-3, 0.75e-3, 0.5e-3, 0.25e-3])
    logged = [v for _, v in read_scalars(run)["train/lr"]]
    assert logged == pytest.approx(used)


# -- a NaN loss ---------------------------------------------------------------------------------------------


def test_nan_loss_stops_with_training_error(tmp_path, monkeypatch, tiny_config):
    run = tmp_path / "run"
    real_forward = GroupRouter.forward
    calls = {"n": 0}

    def forward_nan_from_third_call(self, td, *args):
        losses = real_forward(self, td, *args)
        calls["n"] += 1
        if calls["n"] >= 3:
            losses.set(("agents", "loss_objective"), losses.get(("agents", "loss_objective")) * float("nan"))
        return losses

    monkeypatch.setattr(GroupRouter, "forward", forward_nan_from_third_call)
    cfg = tiny_config(overrides=[f"train.total_frames={5 * FPB}"])
    with pytest.raises(TrainingError) as info:
        Trainer(cfg, run_dir=run).fit()
    msg = str(info.value)
    assert "non-finite loss" in msg
    assert "agents/loss_objective=nan" in msg
    assert "last good checkpoint" in msg
    assert calls["n"] == 3

    state = last_checkpoint(run)
    assert state["iteration"] == 2 and state["frames"] == 2 * FPB
    for k, v in state["router"].items():
        if v.is_floating_point():
            assert torch.isfinite(v).all(), f"checkpointed parameter {k} is not finite"
    good = torch.load(run / "checkpoints" / "iter_00002.pt", weights_only=True)
    for k in state["router"]:
        assert torch.equal(state["router"][k], good["router"][k])
    assert not (run / "checkpoints" / "iter_00003.pt").exists()
    error = (run / "error.txt").read_text()
    assert error.startswith("TrainingError: non-finite loss")
    scalars = read_scalars(run)
    assert steps(scalars, "train/loss") == [FPB, 2 * FPB]
    assert all(math.isfinite(v) for _, v in scalars["train/loss"])


# -- PettingZoo ----------------------------------------------------------------------------------------------


PZ_TINY = [
    "env.num_envs=2",
    "env.max_steps=5",
    "train.frames_per_batch=20",
    "train.total_frames=40",
    "train.num_epochs=1",
    "train.minibatch_size=10",
    "model.hidden=[16]",
    "log.eval_every=0",
    "log.eval_episodes=2",
    "log.checkpoint_every=0",
    "log.progress=false",
    "log.plot=false",
]


def _assert_per_group_metrics(run: Path, summary: dict, groups: list[str]) -> None:
    scalars = read_scalars(run)
    for g in groups:
        for name in ("loss_objective", "loss_critic", "entropy"):
            key = f"train/{g}/{name}"
            assert steps(scalars, key) == [20, 40], key
            assert all(math.isfinite(v) for _, v in scalars[key]), key
        assert f"collect/{g}/train_reward" in scalars
        assert f"collect/{g}/episode_reward" in scalars, "episodes of 5 steps end within a 10-step batch"
        assert math.isfinite(summary[f"eval/{g}/episode_reward"])
    assert not [k for k in scalars if k.startswith("train/") and k.count("/") > 1 and k.split("/")[1] not in groups], (
        "metrics for a group the env does not have"
    )


def test_pettingzoo_simple_spread_from_config_file(tmp_path):
    cfg = load_config(ROOT / "configs" / "simple_spread.yaml", PZ_TINY)
    assert cfg.env.kind == "pettingzoo"
    trainer = Trainer(cfg, run_dir=tmp_path / "spread")
    assert list(trainer.parts.groups) == ["agent"] and trainer.parts.groups["agent"].n_agents == 3
    summary = trainer.fit()
    assert summary["iteration"] == 2 and summary["frames"] == 40
    _assert_per_group_metrics(tmp_path / "spread", summary, ["agent"])


@pytest.mark.slow
def test_pettingzoo_parallel_workers_collect_the_same_data_as_serial(tmp_path):
    # env.parallel=true runs the copies in worker processes; with the same seeds the run is the same
    summaries = {}
    for parallel in (False, True):
        cfg = load_config(ROOT / "configs" / "simple_spread.yaml", PZ_TINY + [f"env.parallel={parallel}"])
        trainer = Trainer(cfg, run_dir=tmp_path / f"parallel-{parallel}")
        if parallel:
            assert isinstance(trainer.parts.env.base_env, ParallelEnv)
        summaries[parallel] = trainer.fit()
        summaries[parallel].pop("run_dir")
    # the collector line names how the copies were stepped; the numbers must be the same
    assert "ParallelGames" in summaries[False].pop("collector")
    assert "ParallelGames" not in summaries[True].pop("collector")
    assert summaries[True] == summaries[False]


def test_pettingzoo_simple_tag_two_groups_with_team_reward(tmp_path):
    # configs/simple_tag.yaml's reward table (adversaries share a team reward, root done) on mpe2's simple_tag_v3
    cfg = load_config(
        ROOT / "configs" / "simple_tag.yaml", PZ_TINY + ["env.kind=pettingzoo", "env.scenario=simple_tag_v3"]
    )
    trainer = Trainer(cfg, run_dir=tmp_path / "tag")
    assert {g: s.n_agents for g, s in trainer.parts.groups.items()} == {"adversary": 3, "agent": 1}
    summary = trainer.fit()
    assert summary["iteration"] == 2
    _assert_per_group_metrics(tmp_path / "tag", summary, ["adversary", "agent"])
    table = (tmp_path / "tag" / "reward_table.txt").read_text()
    assert "0.5 × mean(adversary reward)" in table


# -- bad input -------------------------------------------------------------------------------------------------


def test_unknown_vmas_scenario_fails_before_training(tmp_path, tiny_config):
    run = tmp_path / "run"
    with pytest.raises(ConfigError) as info:
        Trainer(tiny_config(overrides=["env.scenario=navigaton"]), run_dir=run)
    msg = str(info.value)
    assert "unknown VMAS scenario 'navigaton'" in msg
    assert "did you mean" in msg and "'navigation'" in msg
    assert not (run / "checkpoints").exists()
    assert not (run / "logs").exists()


def test_unknown_pettingzoo_task_fails_before_training(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(ConfigError) as info:
        Trainer(
            load_config(ROOT / "configs" / "simple_spread.yaml", PZ_TINY + ["env.scenario=simple_sprad_v3"]),
            run_dir=run,
        )
    assert "'simple_sprad_v3'" in str(info.value) and "'simple_spread_v3'" in str(info.value)
    assert not (run / "checkpoints").exists()


@pytest.mark.parametrize(
    "table, expected",
    [
        ("{agents: [{own: 1.0}], ghost: [{own: 1.0}]}", "'ghost'"),  # a row for a group the env lacks
        ("{agents: [{own: 1.0}, {team: [ghost], weight: 0.5}]}", "'ghost'"),  # a term naming it
        ("{robots: [{own: 1.0}]}", "'agents'"),  # the env's group has no row
    ],
    ids=["extra-row", "team-term", "missing-row"],
)
def test_reward_table_naming_missing_group_fails_before_training(tmp_path, table, expected, tiny_config):
    run = tmp_path / "run"
    cfg = tiny_config(overrides=[f"reward_table={table}"])
    with pytest.raises(RewardTableError) as info:
        Trainer(cfg, run_dir=run)
    assert expected in str(info.value)
    assert "agents" in str(info.value)  # and says what the env has
    assert not (run / "checkpoints").exists()
    assert not (run / "logs").exists()


def test_reward_table_from_file_with_missing_group(tmp_path, tiny_config):
    path = tmp_path / "bad.yaml"
    path.write_text("reward_table:\n  agents:\n    reward: [{own: 1.0}, {team: [adversary], weight: -1.0}]\n")
    with pytest.raises(RewardTableError, match="'adversary'"):
        Trainer(tiny_config(path), run_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists()


# -- the run directory -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_run_directory_contents(tmp_path, tiny_config):
    run = tmp_path / "run"
    cfg = tiny_config(overrides=["log.plot=true", "log.checkpoint_every=0", "log.eval_every=1"])
    summary = Trainer(cfg, run_dir=run).fit()

    assert from_yaml((run / "config.yaml").read_text()) == cfg
    assert load_config(run / "config.yaml") == cfg
    table = (run / "reward_table.txt").read_text()
    assert "agents" in table and "own reward (agents.reward)" in table and "[2 agents]" in table

    for name in (
        "train/loss",
        "train/grad_norm",
        "train/lr",
        "train/agents/loss_objective",
        "train/agents/loss_critic",
        "collect/agents/episode_reward",
        "collect/agents/train_reward",
        "eval/agents/episode_reward",
        "time/fps",
    ):
        assert (run / "logs" / "scalars" / f"{name}.csv").is_file(), name
    scalars = read_scalars(run)
    assert steps(scalars, "train/loss") == [FPB, 2 * FPB]
    assert steps(scalars, "eval/agents/episode_reward") == [FPB, 2 * FPB]  # eval_every=1; final one at 2*FPB

    # checkpoint_every=0: only the final checkpoint
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_00002.pt", "last.pt"]
    state = last_checkpoint(run)
    assert state["iteration"] == 2 and state["frames"] == 2 * FPB
    assert set(state) >= {"router", "optimizer", "scheduler", "rng", "config"}

    png = run / "plots" / "returns.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 1000

    on_disk = json.loads((run / "summary.json").read_text())
    assert on_disk == summary
    assert on_disk["iteration"] == 2 and on_disk["frames"] == 2 * FPB
    assert math.isfinite(on_disk["eval/agents/episode_reward"])
    assert not (run / "error.txt").exists()


def test_default_run_dir_is_root_slash_run_name(tmp_path, tiny_config):
    cfg = tiny_config(overrides=[f"log.root={tmp_path}", "train.seed=4"])
    trainer = Trainer(cfg)
    assert trainer.run_dir == tmp_path / "navigation-mappo-seed4"
    assert (trainer.run_dir / "config.yaml").exists()


def test_non_finite_loss_checked_once_per_epoch_names_the_bad_minibatch(monkeypatch, tiny_config):
    # the accelerator path (no host sync per step) must still stop, and name the group and term
    parts = build_mod.build(tiny_config())
    with torch.no_grad():
        batch = parts.reward_table(parts.env.rollout(10, parts.router.policy, break_when_any_done=False))
    parts.router.compute_advantages(batch)
    real_forward = GroupRouter.forward
    calls = {"n": 0}

    def forward_nan_on_second_call(self, td, *args):
        losses = real_forward(self, td, *args)
        calls["n"] += 1
        if calls["n"] == 2:
            losses.set(("agents", "loss_critic"), losses.get(("agents", "loss_critic")) * float("nan"))
        return losses

    monkeypatch.setattr(GroupRouter, "forward", forward_nan_on_second_call)
    with pytest.raises(TrainingError, match="agents/loss_critic=nan"):
        step = build_mod.train_state(tiny_config(), parts).step
        update_mod.ppo_update(parts.router, step, batch, num_epochs=3, minibatch_size=10, check_each_step=False)
    assert calls["n"] == 4  # the first epoch (4 minibatches of 10) ran to its end, then stopped


# -- run directories, evaluation, videos, threads --------------------------------------------------------------


def test_new_run_never_writes_into_another_runs_directory(tmp_path, tiny_config):
    cfg = tiny_config(overrides=[f"log.root={tmp_path}", "log.name=nav", "log.eval_every=0"])
    first = Trainer(cfg)
    assert first.run_dir == tmp_path / "nav"
    first.fit()
    assert Trainer(cfg).run_dir == tmp_path / "nav-2"  # the default directory gets the next free suffix
    assert Trainer(cfg).run_dir == tmp_path / "nav-3"
    with pytest.raises(FileExistsError, match="already holds a run; resume it"):
        Trainer(cfg, run_dir=tmp_path / "nav")  # an explicit directory holding a run is refused
    assert Trainer(cfg, run_dir=tmp_path / "nav", resume=True).iteration == 2


def test_final_evaluation_is_not_repeated_when_the_last_iteration_evaluated(tmp_path, tiny_config):
    # 2 iterations, eval every iteration: the final result is the last iteration's evaluation, logged once per step
    summary = Trainer(tiny_config(overrides=["log.eval_every=1"]), run_dir=tmp_path / "run").fit()
    scalars = read_scalars(tmp_path / "run")
    rows = scalars["eval/agents/episode_reward"]
    assert steps(scalars, "eval/agents/episode_reward") == [FPB, 2 * FPB]
    assert summary["eval/agents/episode_reward"] == pytest.approx(rows[-1][1])


def test_video_of_each_evaluation_is_an_animated_gif(tmp_path, tiny_config):
    from PIL import Image

    cfg = tiny_config(overrides=["log.video=true", "log.eval_every=2", "env.max_steps=6"])
    Trainer(cfg, run_dir=tmp_path / "run").fit()
    videos = sorted((tmp_path / "run" / "videos").glob("*.gif"))
    assert [v.name for v in videos] == ["eval_iter00002.gif"]
    with Image.open(videos[0]) as gif:
        assert gif.n_frames == 6 and gif.size == (700, 700)  # the reset frame and every step but the last


def test_a_pettingzoo_run_records_its_evaluations_as_gifs(tmp_path):
    """MPE's simple_spread (copies stepped by ParallelGames, built with render_mode=rgb_array for the
    evaluation): each evaluation's first episode is a GIF of the game's own frames, agents moving."""
    from PIL import Image, ImageChops

    overrides = [
        "log.video=true",
        "log.eval_every=2",
        "log.eval_episodes=1",
        "env.num_envs=2",
        "env.max_steps=6",
        "train.frames_per_batch=12",
        "train.total_frames=24",
        "train.minibatch_size=12",
        "model.hidden=[16]",
        "log.progress=false",
        "log.plot=false",
    ]
    Trainer(load_config(ROOT / "configs" / "simple_spread.yaml", overrides), run_dir=tmp_path / "run").fit()
    videos = sorted((tmp_path / "run" / "videos").glob("*.gif"))
    assert [v.name for v in videos] == ["eval_iter00002.gif"]
    with Image.open(videos[0]) as gif:  # (Pillow stores a frame equal to the one before it once)
        assert gif.n_frames > 1 and gif.size == (700, 700)
        first = gif.convert("RGB")
        gif.seek(gif.n_frames - 1)
        assert ImageChops.difference(first, gif.convert("RGB")).getbbox() is not None  # the agents moved


def test_num_threads_sets_torch_threads(tmp_path, tiny_config):
    before = torch.get_num_threads()
    try:
        Trainer(tiny_config(overrides=["train.num_threads=1"]), run_dir=tmp_path / "run")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_tensorboard_logger_gets_the_same_scalars_as_csv(tmp_path, tiny_config):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    Trainer(tiny_config(overrides=["log.loggers=[csv,tensorboard]", "log.eval_every=1"]), run_dir=run).fit()
    events = list((run / "tensorboard").rglob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file"
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    csv = read_scalars(run)
    for name in ("eval/agents/episode_reward", "train/agents/loss_objective", "time/fps"):
        tb = [(e.step, e.value) for e in acc.Scalars(name)]
        assert [s for s, _ in tb] == [s for s, _ in csv[name]]
        assert [v for _, v in tb] == pytest.approx([v for _, v in csv[name]], rel=1e-5)


def test_checkpoint_loads_onto_another_device(tmp_path, tiny_config):
    # a run's checkpoint is read to CPU first, then copied onto the modules' device
    run = tmp_path / "run"
    Trainer(tiny_config(), run_dir=run).fit()
    cfg, parts = build_mod.load_policy(run, device="cpu")
    assert cfg.train.device == "cpu" and cfg.env.device == "cpu"
    saved = last_checkpoint(run)["router"]
    for k, v in parts.router.state_dict().items():
        assert torch.equal(v, saved[k])


def test_logger_that_is_not_installed_is_named(tmp_path, monkeypatch, tiny_config):
    import torchrl.record.loggers.wandb as torchrl_wandb

    monkeypatch.setattr(torchrl_wandb, "_has_wandb", False)  # as torchrl sees a machine without wandb
    with pytest.raises(ImportError, match="log.loggers asks for 'wandb', which is not installed"):
        Trainer(tiny_config(overrides=["log.loggers=[csv,wandb]"]), run_dir=tmp_path / "run")
