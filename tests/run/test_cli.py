"""Tests for the ``marl-ppo`` command line (:func:`marl_ppo.cli.main`) and its console script.

Covered: ``train`` with overrides writes a run directory; ``train --resume`` continues it;
``eval`` prints JSON with per-group returns (VMAS and a PettingZoo run); ``plot`` draws several runs
on one figure; bad input returns 1 with one clear line on stderr; the installed entry point works.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from marl_ppo.cli import main
from marl_ppo.config import Config, load_config
from marl_ppo.run.logger import read_scalars

ROOT = Path(__file__).resolve().parents[2]

FPB = 40
TINY = [
    "env.num_envs=4",
    "env.max_steps=10",
    f"train.frames_per_batch={FPB}",
    f"train.total_frames={2 * FPB}",
    "train.num_epochs=1",
    "train.minibatch_size=20",
    "model.hidden=[16]",
    "log.eval_every=0",
    "log.eval_episodes=2",
    "log.progress=false",
    "log.plot=false",
]
PZ_TINY = [
    "env.num_envs=2",
    "env.max_steps=5",
    "train.frames_per_batch=20",
    "train.total_frames=20",
    "train.num_epochs=1",
    "train.minibatch_size=10",
    "model.hidden=[16]",
    "log.eval_every=0",
    "log.eval_episodes=2",
    "log.progress=false",
    "log.plot=false",
]


def make_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """The config that ``marl-ppo train [path] TINY... overrides...`` resolves to."""
    return load_config(path, overrides=TINY + list(overrides or []))


def train(tmp_path: Path, name: str, *extra: str, config: str | None = None) -> Path:
    args = ["train"] + ([config] if config else []) + TINY + [f"log.root={tmp_path}", f"log.name={name}", *extra]
    assert main(args) == 0
    return tmp_path / name


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """One tiny VMAS navigation run through the CLI, shared by the eval/plot tests."""
    return train(tmp_path_factory.mktemp("cli-runs"), "nav")


def test_train_writes_run_dir(tmp_path, capsys):
    run = train(tmp_path, "run-a", "train.seed=1", "log.progress=true")
    captured = capsys.readouterr()
    out = captured.out
    assert f"{2 * FPB}/{2 * FPB}" in captured.err and "frames" in captured.err  # the progress bar
    assert f"run directory: {run}" in out
    assert "reward table" in out
    summary = json.loads(out[out.index("{") :])  # the summary is the last thing printed
    assert summary["iteration"] == 2 and summary["frames"] == 2 * FPB
    assert summary["run_dir"] == str(run)
    for name in ("config.yaml", "reward_table.txt", "summary.json", "checkpoints/last.pt"):
        assert (run / name).is_file(), name
    assert load_config(run / "config.yaml") == make_config(
        None, [f"log.root={tmp_path}", "log.name=run-a", "train.seed=1", "log.progress=true"]
    )
    assert [s for s, _ in read_scalars(run)["train/loss"]] == [FPB, 2 * FPB]


def test_train_with_config_file_and_overrides(tmp_path, capsys):
    run = tmp_path / "tag"
    args = [
        "train",
        str(ROOT / "configs" / "simple_tag.yaml"),
        *TINY,
        f"log.root={tmp_path}",
        "log.name=tag",
        f"train.total_frames={FPB}",
    ]
    assert main(args) == 0
    capsys.readouterr()
    cfg = load_config(run / "config.yaml")
    assert cfg.env.scenario == "simple_tag" and cfg.reward_table is not None
    assert "mean(adversary reward)" in (run / "reward_table.txt").read_text()
    assert {"train/adversary/loss_objective", "train/agent/loss_objective"} <= set(read_scalars(run))


def test_train_resume_continues(tmp_path, capsys):
    run = train(tmp_path, "resumable")
    capsys.readouterr()
    assert main(["train", "--resume", str(run), f"train.total_frames={4 * FPB}"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("{") :])
    assert summary["iteration"] == 4 and summary["frames"] == 4 * FPB
    assert [s for s, _ in read_scalars(run)["train/loss"]] == [FPB, 2 * FPB, 3 * FPB, 4 * FPB]


def test_resume_of_missing_run_fails_cleanly(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert "cannot resume" in err and "config.yaml" in err


def test_eval_prints_json_per_group(trained_run, capsys):
    capsys.readouterr()
    assert main(["eval", str(trained_run), "--episodes", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run_dir"] == str(trained_run)
    assert set(data["episode_reward"]) == {"agents"}
    assert isinstance(data["episode_reward"]["agents"], float)


def test_eval_is_deterministic(trained_run, capsys):
    outs = []
    for _ in range(2):
        capsys.readouterr()
        assert main(["eval", str(trained_run), "--episodes", "2"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[1]


def test_eval_saves_a_video_with_the_same_returns(trained_run, tmp_path, capsys):
    from PIL import Image

    capsys.readouterr()
    assert main(["eval", str(trained_run), "--episodes", "2"]) == 0
    plain = json.loads(capsys.readouterr().out)
    gif = tmp_path / "episode.gif"
    assert main(["eval", str(trained_run), "--episodes", "2", "--video", str(gif)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["video"] == str(gif) and data["episode_reward"] == plain["episode_reward"]
    with Image.open(gif) as image:
        assert image.n_frames == 10  # max_steps=10: the reset frame and every step but the last


def test_suite_subcommand_hands_over_to_the_suite_parser(capsys):
    with pytest.raises(SystemExit) as info:
        main(["suite", "--help"])
    assert info.value.code == 0
    assert "usage: marl-ppo suite" in capsys.readouterr().out


def test_eval_pettingzoo_run(tmp_path, capsys):
    """A run from configs/simple_spread.yaml (kwargs {N: 3}, no n_agents) must evaluate too."""
    run = tmp_path / "spread"
    args = ["train", str(ROOT / "configs" / "simple_spread.yaml"), *PZ_TINY, f"log.root={tmp_path}", "log.name=spread"]
    assert main(args) == 0
    capsys.readouterr()
    code = main(["eval", str(run), "--episodes", "2"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads(captured.out)
    assert set(data["episode_reward"]) == {"agent"}


def test_eval_missing_checkpoint_fails_cleanly(trained_run, capsys):
    assert main(["eval", str(trained_run), "--checkpoint", "iter_99999.pt"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("marl-ppo eval: error:")
    assert "iter_99999.pt" in err


def test_plot_two_runs(trained_run, tmp_path, capsys):
    other = train(tmp_path, "nav-seed1", "train.seed=1")
    out_dir = tmp_path / "figs"
    capsys.readouterr()
    assert main(["plot", str(trained_run), str(other), "--out", str(out_dir)]) == 0
    printed = capsys.readouterr().out.split()
    png = out_dir / "returns.png"
    assert str(png) in printed
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 1000
    for path in printed:
        assert Path(path).is_file()
    # the two seeds of one config are one line, their mean in a band; --separate draws each; another config its own
    assert _description(png).startswith(
        "nav (2 seeds): mean over seeds, band: the seeds' range (too few seeds for an interval)"
    )
    other_lr = train(tmp_path, "nav-lr", "train.seed=1", "train.lr=0.001")
    assert main(["plot", str(trained_run), str(other), str(other_lr), "--out", str(out_dir)]) == 0
    assert "nav (2 seeds): agents" in _description(png) and "nav-lr: agents" in _description(png)
    assert main(["plot", str(trained_run), str(other), "--out", str(out_dir), "--separate"]) == 0
    described = _description(png)
    assert described.startswith("one line per run") and "nav: agents" in described and "nav-seed1: agents" in described


def _description(png: Path) -> str:
    from PIL import Image

    with Image.open(png) as image:
        return image.text["Description"]


def test_plot_default_out_is_first_run_plots(trained_run, capsys):
    assert main(["plot", str(trained_run)]) == 0
    assert (trained_run / "plots" / "returns.png").is_file()
    capsys.readouterr()


def test_plot_of_several_runs_writes_beside_them_and_leaves_each_runs_own_plots(trained_run, tmp_path, capsys):
    other = train(tmp_path, "nav-other", "train.seed=1")
    assert main(["plot", str(other)]) == 0
    own = (other / "plots" / "returns.png").read_bytes()
    assert main(["plot", str(other), str(trained_run)]) == 0
    folder = other.parent / f"plots_{other.name}+{trained_run.name}"
    assert str(folder / "returns.png") in capsys.readouterr().out.split()
    assert (other / "plots" / "returns.png").read_bytes() == own  # A's own plots are A's still


def test_unknown_key_returns_1_with_message(tmp_path, capsys):
    assert main(["train", "train.bogus=1", f"log.root={tmp_path}"]) == 1
    captured = capsys.readouterr()
    assert "unknown config key" in captured.err
    assert "'train.bogus'" in captured.err
    assert captured.err.startswith("marl-ppo train: error: ConfigError:")
    assert len(captured.err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir()), "nothing is written for a config that does not load"


def test_bad_choice_returns_1(capsys):
    assert main(["train", "loss.algorithm=xyz"]) == 1
    err = capsys.readouterr().err
    assert "loss.algorithm" in err and "'mappo'" in err


def test_missing_config_file_returns_1(capsys):
    assert main(["train", "no/such/file.yaml"]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "usage: marl-ppo" in capsys.readouterr().err


def _console_script() -> Path:
    return Path(sys.executable).parent / ("marl-ppo.exe" if os.name == "nt" else "marl-ppo")


def test_console_script_help():
    script = _console_script()
    assert script.exists(), f"the marl-ppo entry point is not installed next to {sys.executable}"
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage: marl-ppo" in proc.stdout
    for command in ("train", "eval", "plot"):
        assert command in proc.stdout


@pytest.mark.slow
def test_module_entry_point_reports_errors():
    proc = subprocess.run(
        [sys.executable, "-m", "marl_ppo.cli", "train", "train.lr_rate=1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 1
    assert "unknown config key 'train.lr_rate'; did you mean 'train.lr'?" in proc.stderr


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["suite", "--help"]])
def test_help_imports_no_torch(argv):
    """``import marl_ppo`` is lazy: asking for help does not pay for torch, torchrl, VMAS or PettingZoo."""
    code = (
        f"import sys\nfrom marl_ppo.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'torchrl', 'vmas', 'pettingzoo') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_eval_matches_the_runs_own_final_evaluation(trained_run, capsys):
    """One evaluation: `marl-ppo eval RUN --episodes N` with the run's log.eval_episodes gives the final
    evaluation the run logged (the same envs, seed rule and episode count)."""
    capsys.readouterr()
    assert main(["eval", str(trained_run), "--episodes", "2"]) == 0  # the tiny runs' log.eval_episodes
    data = json.loads(capsys.readouterr().out)
    logged = json.loads((trained_run / "summary.json").read_text())
    assert data["episodes"] == logged["eval/episodes"] == 2
    assert data["episode_reward"]["agents"] == logged["eval/agents/episode_reward"]


def test_a_sampled_evaluation_is_logged_as_eval_sample_gives_it(tmp_path, trained_run, capsys):
    """log.eval_deterministic=false: the run's evaluations sample the actions, seeded, so `marl-ppo eval RUN`
    (which follows the run's config) and `--sample` give the logged figure; and `--sample` on a run that
    evaluates deterministically gives another figure than its deterministic evaluation."""
    run = train(tmp_path, "sampled", "log.eval_deterministic=false")
    capsys.readouterr()

    def evaluated(run_dir, *flags):
        assert main(["eval", str(run_dir), "--episodes", "2", *flags]) == 0
        return json.loads(capsys.readouterr().out)["episode_reward"]["agents"]

    logged = json.loads((run / "summary.json").read_text())["eval/agents/episode_reward"]
    assert evaluated(run) == evaluated(run, "--sample") == logged
    assert evaluated(trained_run, "--sample") == evaluated(trained_run, "--sample") != evaluated(trained_run)


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_eval_refuses_a_bad_episode_count_in_one_line(trained_run, capsys, value):
    with pytest.raises(SystemExit) as info:
        main(["eval", str(trained_run), "--episodes", value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --episodes: expected an integer >= 1" in err and "Traceback" not in err


@pytest.mark.slow
def test_an_evaluation_that_finishes_no_episode_says_so_and_reports_no_return(tmp_path, capsys):
    """Tic-tac-toe games last 5 to 9 moves; with env.max_steps=1 (for classic games, only the evaluation's
    length: 2 steps for 1 episode) no game ends. Training says so once, logs no eval return (only
    eval/episodes = 0); `marl-ppo eval` says so and exits 1; with --max-steps long enough it counts the game."""
    run = tmp_path / "ttt"
    tiny = [
        *PZ_TINY,
        "env.kwargs={}",
        "env.num_envs=2",
        "train.frames_per_batch=20",
        "train.total_frames=40",
        "env.max_steps=1",
        "log.eval_episodes=1",
        "log.eval_every=1",
    ]
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                str(ROOT / "configs" / "tictactoe_two_groups.yaml"),
                *tiny,
                f"log.root={tmp_path}",
                "log.name=ttt",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert err.count("no episode finished within 2 steps per env copy") == 1
    scalars = read_scalars(run)
    assert not [m for m in scalars if m.startswith("eval/") and m.endswith("/episode_reward")]
    assert [v for _, v in scalars["eval/episodes"]] == [0.0, 0.0]
    assert not [k for k in json.loads((run / "summary.json").read_text()) if k.endswith("/episode_reward")]
    assert main(["eval", str(run), "--episodes", "1"]) == 1
    captured = capsys.readouterr()
    assert "no episode finished within 2 steps per env copy" in captured.err and "--max-steps" in captured.err
    assert captured.out == ""  # no JSON with a return
    assert main(["eval", str(run), "--episodes", "1", "--max-steps", "20"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 1


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_plot_refuses_a_directory_without_a_run_and_writes_nothing(tmp_path, capsys, make):
    target = tmp_path / "not-a-run"
    if make == "empty":
        target.mkdir()
    assert main(["plot", str(target)]) == 1
    err = capsys.readouterr().err
    assert str(target) in err and ("does not exist" in err or "holds no logged metrics" in err)
    assert not (target / "plots").exists()
    assert target.exists() == (make == "empty")
