"""``train.seeds``: many seeds in one process, each writing a single run's directory (real VMAS navigation).

The update's known answer (each seed's update is its single run's) is ``tests/core/test_seeds.py``;
here: the run directories, the seeds' starting networks, reproducibility of the group, refusals.
"""

from __future__ import annotations

import copy
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from marl_ppo.cli import main
from marl_ppo.run.build import build, load_policy
from marl_ppo.run.checkpoints import load_checkpoint
from marl_ppo.run.seeds import seed_config
from marl_ppo.run.trainer import Trainer


def _group(tiny_config, tmp_path, name="group", seeds="[0,1]"):
    return [*tiny_config.overrides, f"train.seeds={seeds}", f"log.root={tmp_path}", f"log.name={name}"]


def test_each_seed_writes_a_single_runs_directory(tiny_config, tmp_path, capsys):
    assert main(["train", *_group(tiny_config, tmp_path), "log.plot=true"]) == 0
    out = capsys.readouterr().out  # the run directories, the reward table, the group's result, the summaries
    summaries = json.loads(out[out.index("\n[") + 1 :])  # last on stdout, for scripts to parse
    assert [s["run_dir"] for s in summaries] == [str(tmp_path / "group-seed0"), str(tmp_path / "group-seed1")]
    for s in (0, 1):
        run = tmp_path / f"group-seed{s}"
        cfg, parts = load_policy(run)  # its config is a single run's, with its seed
        assert cfg.train.seed == s and cfg.train.seeds == [] and cfg.log.name == f"group-seed{s}"
        parts.env.close()
        summary = json.loads((run / "summary.json").read_text())
        assert summary["frames"] == 2 * tiny_config.fpb and summary["iteration"] == 2
        assert "2 seeds in one process" in summary["collector"]
        assert [p.name for p in sorted((run / "checkpoints").glob("iter_*.pt"))] == ["iter_00001.pt", "iter_00002.pt"]
        assert (run / "logs" / "scalars" / "train" / "agents" / "loss_objective.csv").exists()
        assert main(["eval", str(run), "--episodes", "2"]) == 0
    first, second = (load_checkpoint(tmp_path / f"group-seed{s}" / "checkpoints" / "last.pt") for s in (0, 1))
    assert any(not torch.equal(first["router"][k], second["router"][k]) for k in first["router"])

    # the group's result: each seed's final returns, their mean and sd, and the band figures
    group_dir = tmp_path / "group-seeds"
    assert f"seed group [0, 1]: {group_dir / 'group_summary.json'}" in out
    result = json.loads((group_dir / "group_summary.json").read_text())
    assert result["seeds"] == [0, 1] and result["failed"] == {} and result["frames"] == 2 * tiny_config.fpb
    evals = [s["eval/agents/episode_reward"] for s in summaries]
    final = result["final"]["eval/agents/episode_reward"]
    assert final["values"] == pytest.approx(evals) and final["mean"] == pytest.approx(sum(evals) / 2)
    assert final["sd"] == pytest.approx(abs(evals[0] - evals[1]) / 2**0.5)
    # two seeds give no interval (a bootstrap of two values is their range): the record and the line say so
    assert final["ci95"] is None and final["no_interval"] == "too few seeds for an interval (2 < 3)"
    line = next(line for line in out.splitlines() if line.startswith("  eval/agents/episode_reward: "))
    assert "(n=2: too few seeds for an interval)" in line and "CI" not in line, line
    last_train = [
        float(
            (tmp_path / f"group-seed{s}/logs/scalars/collect/agents/episode_reward.csv")
            .read_text()
            .split()[-1]
            .split(",")[1]
        )
        for s in (0, 1)
    ]
    assert result["final"]["collect/agents/episode_reward"]["values"] == pytest.approx(last_train)
    assert (group_dir / "returns.png").exists() and (group_dir / "diagnostics.png").exists()
    assert _description(group_dir / "returns.png").startswith(
        "group (2 seeds): mean over seeds, band: the seeds' range (too few seeds for an interval)"
    )
    for s in (0, 1):
        assert json.loads((tmp_path / f"group-seed{s}" / "seeds_group.json").read_text())["group_dir"] == str(group_dir)


def assert_same_group_result(straight: Path, resumed: Path, out: str, straight_out: str | None = None) -> None:
    """The resumed group's ``g-seeds`` result (``out``: what its ``--resume`` printed) is the uninterrupted group's:
    the same seeds, frames and final figures, in its own directory named by its seeds' group files, with its
    figures where the runs drew them, and the same lines printed."""
    group, want = resumed / "g-seeds", straight / "g-seeds"
    assert (group / "group_summary.json").exists(), f"the resumed group wrote no result: {sorted(resumed.iterdir())}"
    got, expected = (json.loads((d / "group_summary.json").read_text()) for d in (group, want))
    assert got["run_dirs"] == [str(resumed / f"g-seed{s}") for s in (0, 1)]
    assert {k: v for k, v in got.items() if k != "run_dirs"} == {k: v for k, v in expected.items() if k != "run_dirs"}
    assert got["final"] and got["failed"] == {}
    assert (group / "returns.png").exists() == (want / "returns.png").exists()
    lines = _group_lines(out, len(got["final"]))
    assert lines[0] == f"seed group [0, 1]: {group / 'group_summary.json'}", out
    if straight_out is not None:  # the same figures printed
        assert lines[1:] == _group_lines(straight_out, len(got["final"]))[1:]


def _group_lines(out: str, keys: int) -> list[str]:
    """The group's lines that ``marl-ppo train`` printed: its file, then one line per final return."""
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("seed group"))
    return lines[first : first + 1 + keys]


def _description(png: Path) -> str:
    from PIL import Image

    with Image.open(png) as image:
        return image.text["Description"]


def test_three_seeds_give_an_interval_and_say_how_many(tiny_config, tmp_path, capsys):
    from marl_ppo.run import group_result, plots

    assert (plots.MIN_INTERVAL_SEEDS, plots.TOO_FEW) == (group_result.MIN_INTERVAL_SEEDS, group_result.TOO_FEW)
    assert main(["train", *_group(tiny_config, tmp_path, seeds="[0,1,2]"), "log.plot=true"]) == 0
    out = capsys.readouterr().out
    final = json.loads((tmp_path / "group-seeds" / "group_summary.json").read_text())["final"]
    d = final["eval/agents/episode_reward"]
    assert d["n"] == 3 and "no_interval" not in d
    half = 4.302653 * d["sd"] / 3**0.5  # Student's t at 3 seeds (a percentile bootstrap would be their range)
    assert d["method"] == "t" and d["ci95"] == pytest.approx([d["mean"] - half, d["mean"] + half])
    line = next(line for line in out.splitlines() if line.startswith("  eval/agents/episode_reward: "))
    assert line.endswith(f"95% CI [{d['ci95'][0]:.4g}, {d['ci95'][1]:.4g}] (n=3, t)"), line
    assert _description(tmp_path / "group-seeds" / "returns.png").startswith(
        "group (3 seeds): mean over seeds, 95% interval of the mean (Student's t below 10 seeds)"
    )


def test_each_seed_starts_from_its_single_runs_networks(tiny_config, tmp_path):
    cfg = tiny_config(overrides=["train.seeds=[3,5]", f"log.root={tmp_path}"])
    group = Trainer(cfg)
    for index, s in enumerate((3, 5)):
        single = build(seed_config(cfg, s))
        single.env.close()
        want, got = single.router.state_dict(), group.state.stack.state_dict(index)
        assert all(torch.equal(got[k], want[k]) for k in want)
    group.close()
    group.env.close()


def test_the_same_seeds_give_the_same_group_bit_for_bit(tiny_config, tmp_path):
    for name in ("a", "b"):
        assert main(["train", *_group(tiny_config, tmp_path, name=name)]) == 0
    for s in (0, 1):
        a, b = (load_checkpoint(tmp_path / f"{n}-seed{s}" / "checkpoints" / "last.pt") for n in ("a", "b"))
        assert a["router"].keys() == b["router"].keys()
        assert all(torch.equal(a["router"][k], b["router"][k]) for k in a["router"]), f"seed {s}"


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            ["env.kind=custom", "env.factory=tests/envs/custom_envs.py:make_depot_fixed"],  # ignores num_envs
            ["the env has batch size [3]", "a factory for many seeds takes num_envs"],
        ),
        (["loss.value_norm=popart"], ["popart"]),
        (["train.collector.backend=process"], ["train.collector.backend=process"]),
        (["train.seeds=[1,1]"], ["train.seeds must be different seeds", "[1, 1]"]),
    ],
)
def test_what_many_seeds_cannot_run_is_refused_before_any_run_directory(
    tiny_config, tmp_path, capsys, overrides, words
):
    group = [o for o in _group(tiny_config, tmp_path) if "n_agents" not in o]  # navigation's own keyword
    assert main(["train", *group, *overrides]) == 1
    err = capsys.readouterr().err
    for word in words:
        assert word in err, err
    assert not any(tmp_path.iterdir())


def test_one_seed_is_its_single_run_bit_for_bit(tiny_config, tmp_path):
    assert main(["train", *_group(tiny_config, tmp_path, name="one", seeds="[0]")]) == 0
    assert main(["train", *tiny_config.overrides, "train.seed=0", f"log.root={tmp_path}", "log.name=single"]) == 0
    a = load_checkpoint(tmp_path / "one-seed0" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "single" / "checkpoints" / "last.pt")
    assert all(torch.equal(a["router"][k], b["router"][k]) for k in b["router"])
    metrics = "logs/scalars/train/agents/loss_objective.csv"
    assert (tmp_path / "one-seed0" / metrics).read_text() == (tmp_path / "single" / metrics).read_text()


def test_a_group_given_one_run_directory_refuses_it(tiny_config, tmp_path):
    """Each seed writes its own directory: one ``run_dir`` for several seeds is refused, nothing written."""
    from marl_ppo.options import ConfigError

    with pytest.raises(ConfigError, match=r"train.seeds=\[0, 1\]: each seed has its own directory"):
        Trainer(tiny_config(overrides=["train.seeds=[0,1]", f"log.root={tmp_path}"]), run_dir=tmp_path / "one")
    assert not any(tmp_path.iterdir())


def test_each_seeds_entropy_schedule_reaches_the_stacked_update(tiny_config, tmp_path):
    """A linear entropy schedule's value, the training state's, is what each stacked update uses."""
    from marl_ppo.run.logger import read_scalars

    cfg = tiny_config(
        overrides=[
            "train.seeds=[0,1]",
            "loss.entropy_coeff=0.1",
            "loss.entropy_schedule=linear",
            "loss.entropy_final_scale=0.5",
            f"log.root={tmp_path}",
        ]
    )
    group = Trainer(cfg)
    group.fit()
    for s, run_dir in enumerate(group.run_dirs):
        logged = [v for _, v in read_scalars(run_dir)["train/agents/action/entropy_coeff"]]
        assert logged == pytest.approx([0.1, 0.1 * (1 - 0.5 / 2)])  # the coefficient each update used
        scalars = read_scalars(run_dir)
        used = [-loss / (c * entropy) for (_, loss), c, (_, entropy) in
                zip(scalars["train/agents/loss_entropy"], logged, scalars["train/agents/entropy"])]  # fmt: skip
        assert used == pytest.approx([1.0, 1.0], rel=1e-4)  # the losses were computed with those coefficients
        stacked = group.state.stack.stored("losses.agents.head_entropy_coeffs")[s]
        assert stacked.tolist() == pytest.approx([0.1])  # the configured one: the schedule is the state's value
    assert group.state.entropy_scale == pytest.approx(0.5)  # what a third update would use


@pytest.mark.parametrize("config", ["simple_spread", "tictactoe_two_groups"])
def test_pettingzoo_seeds_share_one_batch_of_env_copies(tmp_path, capsys, config):
    """MPE simple_spread, and tic-tac-toe (turns, action masks, two groups), through PettingZoo: 2 seeds on
    2 x 4 env copies (torchrl's collector), two single-run directories whose policies differ."""
    overrides = ["env.num_envs=4", "train.frames_per_batch=200", "train.total_frames=400", "train.minibatch_size=100"]
    overrides += ["train.num_epochs=1", "model.hidden=[16]", "log.plot=false", "log.eval_episodes=2"]
    assert main(["train", config, *overrides, "train.seeds=[0,1]", f"log.root={tmp_path}", "log.name=pz"]) == 0
    runs = [tmp_path / f"pz-seed{s}" for s in (0, 1)]
    for s, run in enumerate(runs):
        summary = json.loads((run / "summary.json").read_text())
        assert summary["frames"] == 400 and "2 seeds in one process" in summary["collector"]
    a, b = (load_checkpoint(run / "checkpoints" / "last.pt")["router"] for run in runs)
    assert any(not torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["model.share_params=false"],
        ["model.kind=gru", "model.seq_len=5"],
        ["env.scenario=simple_reference", "env.comm=true", "env.kwargs={}"],
        ["model.share_params=false", "loss.algorithm=happo", "loss.happo.order=fixed"],
    ],
    ids=["shared", "unshared", "gru", "composite", "happo"],
)
def test_a_group_crash_then_resume_reproduces_the_uninterrupted_group(tmp_path, monkeypatch, capsys, extra):
    """6 iterations, checkpoints every 3, a crash after iteration 4; `--resume` of seed 1's directory resumes
    both seeds from their checkpoints and ends where the uninterrupted group ends, bit for bit (with one
    network for all agents, each agent its own, a GRU and a composite action, whose losses run seed by seed,
    and HAPPO's agents updated one after another)."""
    from marl_ppo.config import load_config
    from tests.run.test_recovery import FPB, TINY, assert_same_state, comparable, crash_after_logging

    tiny = [o for o in TINY if "n_agents" not in o] if extra[-1:] == ["env.kwargs={}"] else TINY

    def config(root):
        return load_config(None, overrides=[*tiny, "train.seeds=[0,1]", *extra, f"log.root={root}", "log.name=g"])

    Trainer(config(tmp_path / "straight")).fit()
    crash_after_logging(monkeypatch, 4, FPB)
    with pytest.raises(RuntimeError, match="simulated crash"):
        Trainer(config(tmp_path / "crashed")).fit()
    monkeypatch.undo()
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "crashed" / "g-seed1")]) == 0
    assert_same_group_result(tmp_path / "straight", tmp_path / "crashed", capsys.readouterr().out)
    for s in (0, 1):
        straight, resumed = tmp_path / "straight" / f"g-seed{s}", tmp_path / "crashed" / f"g-seed{s}"
        assert_same_state(straight, resumed)
        assert comparable(resumed) == comparable(straight)


@pytest.mark.parametrize(
    "overrides",
    [[], ["model.share_params=false"], ["env.scenario=simple_reference", "env.comm=true", "env.kwargs={}"]],
    ids=["shared", "unshared", "composite"],
)
def test_the_seeds_collection_policy_acts_as_each_seeds_own(overrides):
    """Seed s's env copies get exactly the distribution parameters its single run's actor gives them, with
    one network for all agents, each agent its own (``model.share_params=false``), or a composite action
    (VMAS's communication: a move and a message head)."""
    from marl_ppo.config import load_config
    from marl_ppo.core.seeds import SeedStack
    from marl_ppo.run.seeds import seed_policy

    cfg = load_config(overrides=["env.num_envs=4", "model.hidden=[16]", *overrides])
    parts = [build(seed_config(cfg, s)) for s in range(3)]
    routers = [p.router for p in parts]
    policy = seed_policy(SeedStack([copy.deepcopy(r) for r in routers]))
    first = parts[0].env.reset()
    for p in parts:
        p.env.close()
    for actor, group in zip(policy.module, routers[0].groups, strict=True):
        obs = first[group, "observation"].repeat(3, 1, 1)  # [3 seeds x 4 envs, agents, obs]
        obs = obs + torch.randn_like(obs)
        out = actor.module[0].module(obs)  # the group's network, run by SeedNet
        out = (out,) if isinstance(out, torch.Tensor) else out
        for s, router in enumerate(routers):
            own = router.policy.module[list(router.groups).index(group)].module[0].module(obs[s * 4 : (s + 1) * 4])
            own = (own,) if isinstance(own, torch.Tensor) else own
            for got, want in zip(out, own, strict=True):
                torch.testing.assert_close(got[s * 4 : (s + 1) * 4], want, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(out[0][:4], out[0][4:8])  # the seeds' networks differ


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_a_recurrent_seeds_collection_policy_acts_as_each_seeds_own(kind):
    """Seed by seed (``SeedLoop``): seed s's env copies get its single run's actions (deterministic) and next
    hidden states, from states that differ per env."""
    from tensordict.nn import set_interaction_type
    from torchrl.envs.utils import ExplorationType

    from marl_ppo.config import load_config
    from marl_ppo.core.seeds import SeedStack
    from marl_ppo.run.seeds import SeedLoop, seed_policy

    cfg = load_config(overrides=["env.num_envs=4", "model.hidden=[16]", f"model.kind={kind}"])
    parts = [build(seed_config(cfg, s)) for s in range(3)]
    policy = seed_policy(SeedStack([copy.deepcopy(p.router) for p in parts]))
    assert isinstance(policy, SeedLoop)
    td = parts[0].env.reset().expand(3, 4).reshape(12).clone()
    for p in parts:
        p.env.close()
    for key in parts[0].router.recurrent_keys[:-1]:  # stored states: random, not the reset's zeros
        td.set(key, torch.randn_like(td.get(key)))
    obs = td.get(("agents", "observation"))
    td.set(("agents", "observation"), obs + torch.randn_like(obs))
    with torch.no_grad(), set_interaction_type(ExplorationType.DETERMINISTIC):
        out = policy(td.clone())
        for s, p in enumerate(parts):
            own = p.router.policy(td[s * 4 : (s + 1) * 4].clone())
            for key in [("agents", "action"), *[("next", *k) for k in p.router.recurrent_keys[:-1]]]:
                torch.testing.assert_close(out.get(key)[s * 4 : (s + 1) * 4], own.get(key), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(out.get(("agents", "action"))[:4], out.get(("agents", "action"))[4:8])


def test_a_group_holds_one_copy_of_its_state(tiny_config, tmp_path, monkeypatch):
    """Built once: one env of S x E copies, one template router; the other seeds' initial routers are gone once
    stacked; the template router's tensors are slices of the stacked storages, which the one optimizer steps."""
    import gc
    import weakref

    import marl_ppo.run.build as build_module
    import marl_ppo.run.trainer as trainer_module

    built, routers = [], []

    def build_and_watch(*args, **kwargs):
        built.append(build(*args, **kwargs))
        return built[-1]

    real_router = build_module.initial_router

    def router_and_watch(*args, **kwargs):
        router = real_router(*args, **kwargs)
        routers.append(weakref.ref(router))
        return router

    monkeypatch.setattr(trainer_module, "build", build_and_watch)
    monkeypatch.setattr(build_module, "initial_router", router_and_watch)
    group = Trainer(tiny_config(overrides=["train.seeds=[0,1,2]", f"log.root={tmp_path}", "env.num_envs=2"]))
    gc.collect()
    assert len(built) == 1 and built[0] is group.parts and group.parts.env.batch_size[0] == 3 * 2
    template = group.state.router
    assert [router() is not None for router in routers] == [True, False, False]  # seed 0's is the template
    assert routers[0]() is template is group.parts.router
    stacked = {t.untyped_storage().data_ptr() for t in group.state.stack.params.values(True, True)}
    own = {name: t.untyped_storage().data_ptr() for name, t in template.state_dict(keep_vars=True).items()}
    assert own and all(ptr in stacked for ptr in own.values()), [n for n, p in own.items() if p not in stacked]
    optimized = {p.untyped_storage().data_ptr() for g in group.state.step.optimizer.param_groups for p in g["params"]}
    assert optimized <= stacked and group.state.step.params == group.state.stack.trainable
    group.close()
    group.env.close()


def test_every_generator_draws_on_its_own_device_and_the_order_follows_the_batch(tiny_config, tmp_path, monkeypatch):
    """Each seed's minibatch order comes from its generator, on that generator's device (on CUDA the CPU
    would refuse a CUDA generator), and indexes a batch on the same device."""
    import marl_ppo.core.update as update

    draws = []
    real = torch.randperm

    def randperm(n, *, device=None, generator=None, **kwargs):
        out = real(n, device=device, generator=generator, **kwargs)
        draws.append((generator, torch.device(device) if device is not None else None, out.device))
        return out

    monkeypatch.setattr(update.torch, "randperm", randperm)
    group = Trainer(tiny_config(overrides=["train.seeds=[0,1]", f"log.root={tmp_path}"]))
    generators = group.state.generators
    assert len(generators) == 2 and all(g.device == torch.device(group.cfg.train.device) for g in generators)
    group.fit()
    assert draws and {id(g) for g, _, _ in draws} == {id(g) for g in generators}
    for generator, device, drawn_on in draws:
        assert device == generator.device == drawn_on


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_a_group_checkpoints_every_seed_and_resume_ends_as_the_uninterrupted_group(
    tmp_path, capsys, sig, code
):
    """SIGINT/SIGTERM to a ``train.seeds`` run (a subprocess, a real signal): every seed keeps its last completed
    iteration and its ``error.txt``, the exit code is a single run's; ``--resume`` of a seed's directory then
    ends where the uninterrupted group ends, bit for bit (a checkpoint every iteration: every one is an
    episode boundary the uninterrupted group also restarts at), and writes the group's result, its figures and
    its line, as the uninterrupted group does (a SLURM preemption loses nothing)."""
    from marl_ppo.config import load_config
    from tests.run.test_recovery import FPB, ROOT, TINY, assert_same_state, comparable, wait_for_iterations

    base = [o for o in TINY if not o.startswith(("train.total_frames", "log.checkpoint_every", "env.max_steps"))]
    # episodes of one batch's 10 steps: a checkpoint (and its episode restart) after every iteration
    base += ["env.max_steps=10", "log.checkpoint_every=1", "train.seeds=[0,1]", "log.name=g"]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "marl_ppo.cli",
            "train",
            *base,
            f"train.total_frames={2000 * FPB}",
            f"log.root={tmp_path / 'cut'}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        wait_for_iterations(tmp_path / "cut" / "g-seed1", 3, proc)  # the last seed has logged 3 iterations
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == code, err[-2000:]
    name = signal.Signals(sig).name
    reached = []
    for s in (0, 1):
        run = tmp_path / "cut" / f"g-seed{s}"
        state = load_checkpoint(run / "checkpoints" / "last.pt")
        lines = (run / "logs" / "scalars" / "time" / "iteration.csv").read_text().splitlines()
        assert state["iteration"] == len(lines) >= 3  # the checkpoint holds the last logged iteration
        assert f"stopped by {name} at iteration {state['iteration']}" in (run / "error.txt").read_text()
        reached.append(state["iteration"])
    assert reached[0] == reached[1]
    total = f"train.total_frames={(reached[0] + 2) * FPB}"
    assert main(["train", "--resume", str(tmp_path / "cut" / "g-seed1"), total, "log.plot=true"]) == 0
    resumed_out = capsys.readouterr().out
    assert main(["train", *base, total, f"log.root={tmp_path / 'straight'}", "log.plot=true"]) == 0
    assert_same_group_result(tmp_path / "straight", tmp_path / "cut", resumed_out, capsys.readouterr().out)
    for s in (0, 1):
        straight, resumed = tmp_path / "straight" / f"g-seed{s}", tmp_path / "cut" / f"g-seed{s}"
        assert load_checkpoint(resumed / "checkpoints" / "last.pt")["iteration"] == reached[0] + 2
        assert_same_state(straight, resumed)
        assert comparable(resumed) == comparable(straight)
        assert not (resumed / "error.txt").exists()  # moved into resume.log by the resume
    load_config(tmp_path / "cut" / "g-seed0" / "config.yaml")  # each seed's record stays a single run's


def test_each_seed_of_a_group_starts_from_its_single_runs_parameters(tiny_config, tmp_path):
    """Built once, each seed's initial parameters drawn from its own seed: seed s starts from the same parameters
    alone or in a group (bit for bit), and the seeds start apart."""
    group = Trainer(tiny_config(overrides=["train.seeds=[0,1,2]", f"log.root={tmp_path / 'group'}"]))
    starts = []
    for s in range(3):
        alone = Trainer(tiny_config(overrides=[f"train.seed={s}"]), run_dir=tmp_path / f"alone{s}")
        want, got = alone.state.stack.state_dict(0), group.state.stack.state_dict(s)
        assert sorted(want) == sorted(got)
        assert all(torch.equal(got[k], v) for k, v in want.items()), f"seed {s}"
        starts.append(got)
        alone.close()
        alone.env.close()
    weights = [k for k in starts[0] if k.endswith("weight")]
    assert weights and not any(torch.equal(starts[0][k], starts[1][k]) for k in weights)
    group.close()
    group.env.close()


def test_a_callback_reads_the_live_env_and_router_of_a_group(tiny_config, tmp_path):
    """``trainer.parts`` of a 3-seed run is the run's own: its env steps (not closed) and holds every seed's copies,
    its router holds seed 0's tensors, the training state's stack; a callback sees them at every update."""
    seen = []

    class Watch:
        def on_update_end(self, trainer, metrics):
            env = trainer.parts.env
            td = env.rollout(1, break_when_any_done=False)  # a closed env would raise here
            seen.append((env.batch_size[0], td.batch_size[0], trainer.parts.router is trainer.state.stack.template))

    cfg = tiny_config(overrides=["train.seeds=[0,1,2]", f"log.root={tmp_path}"])
    Trainer(cfg, callbacks=[Watch()]).fit()
    e = cfg.env.num_envs
    assert seen and all(s == (3 * e, 3 * e, True) for s in seen)


def test_frozen_opponents_and_videos_run_with_seeds(tmp_path):
    """Lifted refusals: a random opponent plays every seed's copies, and each seed's evaluation records its video."""
    from marl_ppo.config import load_config

    game = [
        "env.kind=pettingzoo", "env.scenario=tictactoe_v3", "env.num_envs=2", "env.max_steps=9",
        "train.frames_per_batch=20", "train.minibatch_size=20", "train.num_epochs=1", "model.hidden=[8]",
        "train.total_frames=40", "log.eval_every=0", "log.progress=false", "log.plot=false", "log.eval_episodes=1",
    ]  # fmt: skip
    cfg = load_config(None, [*game, "opponents={player_2: random}", "train.seeds=[0,1]", f"log.root={tmp_path}"])
    summaries = Trainer(cfg).fit()
    assert [s["frames"] for s in summaries] == [40, 40]
    assert all("eval/player_1/episode_reward" in s for s in summaries)
    cfg = load_config(None, [*game, "log.video=true", "train.seeds=[0,1]", f"log.root={tmp_path}", "log.name=v"])
    group = Trainer(cfg)
    group.fit()
    assert all(list(d.rglob("*.mp4")) or list(d.rglob("*.gif")) for d in group.run_dirs), group.run_dirs


def test_a_seed_that_stopped_stays_stopped_when_its_group_resumes(tmp_path, monkeypatch, capsys):
    """Seed 0's loss goes non-finite in iteration 4: it stops (its checkpoint of iteration 3 kept, the group file
    says so), the others go on; a crash after iteration 4 and `--resume` (from iteration 3) end as the
    uninterrupted group ends: seed 0 still stopped at its own last checkpoint, seed 1 bit for bit."""
    import json

    from marl_ppo.config import load_config
    from marl_ppo.run.checkpoints import load_checkpoint
    from marl_ppo.run.seeds import GROUP_FILE
    from tests.run.test_recovery import FPB, TINY, assert_same_state, crash_after_logging

    class Poison:
        def on_batch_collected(self, trainer, batch):
            if trainer.iteration == 3:  # the fourth iteration's batch: seed 0's observations
                batch[0].get(("agents", "observation")).fill_(float("nan"))

    def config(root):
        return load_config(None, overrides=[*TINY, "train.seeds=[0,1]", f"log.root={root}", "log.name=g"])

    Trainer(config(tmp_path / "straight"), callbacks=[Poison()]).fit()
    crash_after_logging(monkeypatch, 4, FPB)
    with pytest.raises(RuntimeError, match="simulated crash"):
        Trainer(config(tmp_path / "crashed"), callbacks=[Poison()]).fit()
    monkeypatch.undo()
    group = json.loads((tmp_path / "crashed" / "g-seed1" / GROUP_FILE).read_text())
    assert list(group["stopped"]) == ["0"] and "non-finite loss" in group["stopped"]["0"]
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "crashed" / "g-seed1")]) == 0
    for root in ("straight", "crashed"):
        stopped = load_checkpoint(tmp_path / root / "g-seed0" / "checkpoints" / "last.pt")
        assert stopped["iteration"] == 3 and not (tmp_path / root / "g-seed0" / "summary.json").exists()
        assert load_checkpoint(tmp_path / root / "g-seed1" / "checkpoints" / "last.pt")["iteration"] == 6
    assert_same_state(tmp_path / "straight" / "g-seed1", tmp_path / "crashed" / "g-seed1")
