"""What a user types is understood, and what a run records lets it be reproduced, through the CLI.

Each test runs ``python -m marl_ppo`` in a subprocess on tiny real runs and asserts on the message
and on what is, or is not, left on disk:

* overrides are taken anywhere on the line, and the config name anywhere among them;
* ``--print-config`` and ``--dry-run`` refuse what ``train`` refuses (many seeds with PopArt, with
  opponents), and leave no run directory;
* ``train.seed`` beside ``train.seeds``, and ``pool.payoff_episodes`` without a symmetric pool, are
  refused in one line;
* a budget that is not a whole number of batches is rounded up, said on the terminal and in
  ``run.log``, and the frames done are recorded (no torchrl warning);
* a scripted opponent's file and a ``checkpoint:`` run given as relative paths are recorded as
  absolute ones, and the run is evaluated from another folder;
* a frozen opponent is pinned into the run: after the opponent's run trains on, the dependent run's
  evaluation is unchanged, and its pinned copy still holds the iteration it played;
* a group of seeds whose newest checkpoints of one seed are corrupt resumes from the newest iteration
  every seed has, and every seed ends at the budget (the intact seed bit for bit as before);
* a scripted opponent that raises is named with its seat, env copy and game; one whose signature
  cannot take ``(observation, action_mask)`` is refused when loaded, before any run directory;
* a seed group with a seed's directory gone says which, and ``--skip-missing-seeds`` resumes the rest;
  ``--seat all`` plays every seat; a pool seating without two pool seats names the setting to use;
* match rates carry Wilson intervals (scipy's figures), and ``--sample`` plays more than one game;
* a notebook's callable plays a seat (``Trainer(players=...)``), and is passed again to evaluate.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # whole runs in subprocesses

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "env.num_envs=4", "env.max_steps=10", "env.kwargs.n_agents=2", "train.frames_per_batch=40",
    "train.total_frames=80", "train.num_epochs=1", "train.minibatch_size=40", "model.hidden=[16]",
    "log.eval_every=0", "log.progress=false", "log.plot=false",
]  # fmt: skip
GAME = [
    "env.kind=pettingzoo", "env.scenario=tictactoe_v3", "env.num_envs=2", "env.max_steps=9",
    "train.frames_per_batch=20", "train.minibatch_size=20", "train.num_epochs=1", "model.hidden=[8]",
    "log.eval_every=0", "log.progress=false", "log.plot=false",
]  # fmt: skip


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "marl_ppo", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


def last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.strip().splitlines()[-1]


def test_overrides_are_taken_anywhere_on_the_line(tmp_path):
    proc = cli("train", "--print-config", "train.lr=0.002", "balance", "--dry-run", "env.num_envs=2")
    assert proc.returncode == 0, proc.stderr
    assert "  lr: 0.002" in proc.stdout and "  scenario: balance" in proc.stdout and "  num_envs: 2" in proc.stdout
    proc = cli("train", "a.yaml", "b.yaml", "--print-config")
    assert proc.returncode == 1
    assert last_line(proc) == (
        "marl-ppo train: error: ValueError: one config file or shipped config name at most, got ['a.yaml', "
        "'b.yaml']; overrides are key=value"
    )


@pytest.mark.parametrize(
    "flag, extra, words",
    [
        (
            "--print-config",
            ["loss.value_norm=popart"],
            "many seeds in one process do not support loss.value_norm=popart",
        ),
        ("--dry-run", ["opponents={player_2: pool}", *GAME], "many seeds in one process do not support opponents"),
    ],
)
def test_print_config_and_dry_run_refuse_what_train_refuses(tmp_path, flag, extra, words):
    proc = cli("train", flag, "train.seeds=[0,1]", *extra, f"log.root={tmp_path}")
    assert proc.returncode == 1 and words in last_line(proc), proc.stderr
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_seed_beside_seeds_and_a_payoff_matrix_without_a_pool_are_refused(tmp_path):
    proc = cli("train", "train.seeds=[0,1]", "train.seed=3", f"log.root={tmp_path}")
    assert last_line(proc) == (
        "marl-ppo train: error: ConfigError: train.seed=3 is not used when train.seeds=[0, 1] is given (each seed "
        "of train.seeds is one run's train.seed): put 3 into train.seeds, or drop train.seed"
    )
    proc = cli("train", *GAME, "opponents={player_2: random}", "pool.payoff_episodes=10", f"log.root={tmp_path}")
    assert proc.returncode == 1
    assert "pool.payoff_episodes=10: the payoff matrix needs a symmetric pool" in last_line(proc)
    assert "set pool.payoff_episodes=0" in last_line(proc)
    assert not any(tmp_path.iterdir())


def test_a_budget_that_is_not_whole_batches_is_rounded_up_and_said(tmp_path):
    proc = cli("train", *TINY, "train.total_frames=90", f"log.root={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    said = "train.total_frames=90 is not a multiple of train.frames_per_batch=40: the run does 3 iterations, 120 frames"
    assert f"marl-ppo train: {said}" in proc.stderr and "divisible" not in proc.stderr  # no torchrl warning
    (run,) = [p.parent for p in tmp_path.glob("*/config.yaml")]
    assert json.loads((run / "summary.json").read_text())["frames"] == 120
    assert said in (run / "run.log").read_text()


def test_relative_paths_are_recorded_absolute_and_a_frozen_opponent_is_pinned(tmp_path):
    bots = tmp_path / "work" / "bots"
    bots.mkdir(parents=True)
    (bots / "first.py").write_text(
        "import numpy as np\n\ndef act(observation, action_mask):\n    return int(np.flatnonzero(action_mask)[0])\n"
    )
    work = tmp_path / "work"
    assert cli("train", *GAME, "train.total_frames=40", "log.name=a", "log.root=runs", cwd=work).returncode == 0
    proc = cli(
        "train", *GAME, "train.total_frames=20", "log.name=b", "log.root=runs",
        "opponents={player_2: checkpoint:runs/a}", "log.eval_opponents=[bots/first.py:act]", cwd=work,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    b = work / "runs" / "b"
    config = (b / "config.yaml").read_text()
    assert f"player_2: checkpoint:{b.resolve()}/opponents/player_2" in config  # the pinned copy
    assert f"- {bots.resolve()}/first.py:act" in config
    pinned = json.loads((b / "opponents" / "player_2" / "pinned.json").read_text())
    copy = b / "opponents" / "player_2" / "checkpoints" / "last.pt"
    assert pinned["iteration"] == 2 and pinned["run_dir"] == str((work / "runs" / "a").resolve())
    assert pinned["sha256"] == hashlib.sha256(copy.read_bytes()).hexdigest()
    before = cli("eval", str(b), "--episodes", "4", cwd=tmp_path)  # from another folder
    assert before.returncode == 0, before.stderr
    # the opponent's run trains on: the dependent run still plays (and evaluates against) what it played
    assert cli("train", "--resume", "runs/a", "train.total_frames=80", cwd=work).returncode == 0
    after = cli("eval", str(b), "--episodes", "4", cwd=tmp_path)
    assert json.loads(after.stdout)["episode_reward"] == json.loads(before.stdout)["episode_reward"]
    assert json.loads((work / "runs" / "a" / "summary.json").read_text())["iteration"] == 4
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == pinned["sha256"]


def test_a_seed_group_with_one_seeds_newest_checkpoints_corrupt_brings_every_seed_to_the_budget(tmp_path):
    args = [*TINY, "train.seeds=[0,1]", "train.total_frames=120", "log.checkpoint_every=1", f"log.root={tmp_path}"]
    assert cli("train", *args).returncode == 0
    seed0, seed1 = (tmp_path / f"navigation-mappo-seed{s}" for s in (0, 1))
    digest = hashlib.sha256((seed0 / "checkpoints" / "last.pt").read_bytes()).hexdigest()
    for name in ("last.pt", "iter_00003.pt"):  # seed 1 stands at iteration 2 now
        (seed1 / "checkpoints" / name).write_bytes(b"cut off")
    proc = cli("train", "--resume", str(seed0))
    assert proc.returncode == 0, proc.stderr
    for run in (seed0, seed1):
        summary = json.loads((run / "summary.json").read_text())
        assert (summary["frames"], summary["iteration"]) == (120, 3)
    assert hashlib.sha256((seed0 / "checkpoints" / "last.pt").read_bytes()).hexdigest() == digest
    assert "the group's seeds resume together from iteration 2" in (seed0 / "resume.log").read_text()


def test_a_scripted_opponent_that_raises_or_has_a_wrong_signature_is_named(tmp_path):
    (tmp_path / "bots.py").write_text(
        "def crash(observation, action_mask):\n    return {'a': 1}['b']\n\ndef one(observation):\n    return 0\n"
    )
    proc = cli(
        "train",
        *GAME,
        "train.total_frames=20",
        f"log.root={tmp_path}/runs",
        f"opponents={{player_2: {tmp_path}/bots.py:crash}}",
    )
    assert proc.returncode == 1
    line = last_line(proc)
    assert (
        f"OpponentError: opponents.player_2 ({tmp_path}/bots.py:crash) in copy 0 of tictactoe_v3 raised KeyError: 'b'"
        in line
    )
    assert "for agent 'player_2'" in line
    proc = cli(
        "train",
        *GAME,
        "train.total_frames=20",
        f"log.root={tmp_path}/none",
        f"opponents={{player_2: {tmp_path}/bots.py:one}}",
    )
    assert last_line(proc) == (
        f"marl-ppo train: error: ConfigError: opponents.player_2 ({tmp_path}/bots.py:one): a scripted opponent is "
        "called as act(observation, action_mask); its signature is (observation)"
    )
    assert not (tmp_path / "none").exists()  # refused before any run directory


def test_a_seed_group_with_a_missing_seed_directory_says_which_and_resumes_the_rest(tmp_path):
    args = [*TINY, "train.seeds=[0,1,2]", "train.total_frames=40", f"log.root={tmp_path}"]
    assert cli("train", *args).returncode == 0
    seed0 = tmp_path / "navigation-mappo-seed0"
    missing = tmp_path / "navigation-mappo-seed1"
    for p in sorted(missing.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    missing.rmdir()
    proc = cli("train", "--resume", str(seed0), "train.total_frames=80")
    assert proc.returncode == 1
    assert f"['{missing.resolve()}'] holds no run (no config.yaml)" in last_line(proc)
    assert f"marl-ppo train --resume {seed0} --skip-missing-seeds" in last_line(proc)
    assert cli("train", "--resume", str(seed0), "train.total_frames=80", "--skip-missing-seeds").returncode == 0
    for s in (0, 2):
        assert json.loads((tmp_path / f"navigation-mappo-seed{s}" / "summary.json").read_text())["frames"] == 80


def test_seat_all_and_the_one_pool_seat_hint(tmp_path):
    assert cli("train", *GAME, "train.total_frames=20", f"log.root={tmp_path}").returncode == 0
    (run,) = [p.parent for p in tmp_path.glob("*/config.yaml")]
    proc = cli("eval", str(run), "--opponent", "random", "--seat", "all", "--episodes", "2")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["matches"]) == 2  # both seats
    proc = cli("train", "tictactoe", "opponents={player_2: random}", "--dry-run")
    assert proc.returncode == 1 and last_line(proc).endswith("with one pool seat, set pool.seating=independent")


def test_match_rates_carry_wilson_intervals_and_sample_plays_more_than_one_game(tmp_path):
    from marl_ppo.opponents.outcomes import wilson

    # scipy.stats.binomtest(k, n).proportion_ci(method="wilson"), computed once
    for (k, n), want in {(5, 10): (0.236593090512564, 0.7634069094874361), (0, 10): (0.0, 0.27753279986288926),
                         (194, 200): (0.9361057075454807, 0.9861796856598887)}.items():  # fmt: skip
        assert wilson(k, n) == pytest.approx(want, abs=1e-12)
    assert cli("train", *GAME, "train.total_frames=20", f"log.root={tmp_path}").returncode == 0
    (run,) = [p.parent for p in tmp_path.glob("*/config.yaml")]
    itself = ["eval", str(run), "--opponent", f"checkpoint:{run}", "--seat", "player_1", "--episodes", "12"]
    fixed = json.loads(cli(*itself).stdout)["matches"][0]
    sampled = json.loads(cli(*itself, "--sample").stdout)["matches"][0]
    assert sorted([fixed["win_rate"], fixed["draw_rate"], fixed["loss_rate"]]) == [0.0, 0.0, 1.0]  # one game, 12 times
    assert sum(sampled[r] > 0 for r in ("win_rate", "draw_rate", "loss_rate")) >= 2
    assert fixed["win_rate_ci95"] == pytest.approx(list(wilson(fixed["wins"], 12)))


def test_a_notebooks_callable_plays_a_seat_and_is_passed_again_to_evaluate(tmp_path):
    import numpy as np

    from marl_ppo.config import load_config
    from marl_ppo.run.build import load_policy
    from marl_ppo.run.evaluation import Evaluator
    from marl_ppo.run.trainer import Trainer

    calls = []

    def first_legal(observation, action_mask):  # a closure: no import path can name it again
        calls.append(action_mask.copy())
        return int(np.flatnonzero(action_mask)[0])

    cfg = load_config(overrides=[*GAME, "train.total_frames=20", f"log.root={tmp_path}"])
    with pytest.warns(UserWarning, match="cannot be named in the run's config.yaml"):
        summary = Trainer(cfg, players={"player_2": first_legal}).fit()
    assert calls and all(m.any() for m in calls)  # it played, on legal masks
    recorded = load_config(Path(summary["run_dir"]) / "config.yaml")
    assert recorded.opponents["player_2"].endswith("first_legal")
    with pytest.raises(Exception, match="first_legal"):  # without it, the run cannot be rebuilt: named
        load_policy(summary["run_dir"])
    cfg, parts = load_policy(summary["run_dir"], players={"player_2": first_legal})
    before = len(calls)
    result = Evaluator(cfg, parts.policy, list(parts.groups), episodes=2)()
    assert result.episodes == 2 and len(calls) > before


def test_list_tune_and_a_checkpoint_opponent_of_other_specs_says_which_side_is_which(tmp_path):
    proc = cli("list", "tune")
    assert proc.returncode == 0 and proc.stdout.startswith("searches (marl-ppo tune NAME):")
    assert "  tiny " in proc.stdout and "  navigation " in proc.stdout
    four = [o.replace("tictactoe_v3", "connect_four_v3").replace("max_steps=9", "max_steps=42") for o in GAME]
    assert cli("train", *four, "train.total_frames=20", "log.name=four", f"log.root={tmp_path}").returncode == 0
    proc = cli(
        "train",
        *GAME,
        "train.total_frames=20",
        f"log.root={tmp_path}",
        f"opponents={{player_2: checkpoint:{tmp_path}/four:player_1}}",
    )
    assert proc.returncode == 1
    line = last_line(proc)
    assert "cannot play this run's seat 'player_2': observation shape" in line
    assert "(this run's seat on the left, the other run's group on the right)" in line


def test_list_and_train_name_the_same_extra_for_a_family_whose_package_is_missing(tmp_path):
    """Without pymunk, ``list pettingzoo`` and ``train pistonball`` both name marl-ppo's extra ``butterfly``."""
    block = "import sys; sys.modules['pymunk'] = None; from marl_ppo.cli import main; sys.exit(main(sys.argv[1:]))"
    listed = subprocess.run(
        [sys.executable, "-c", block, "list", "pettingzoo"], capture_output=True, text=True, cwd=ROOT
    )
    assert listed.returncode == 0, listed.stderr
    (line,) = [ln for ln in listed.stdout.splitlines() if ln.strip().startswith("butterfly/pistonball")]
    assert "pip install 'marl-ppo[butterfly]'" in line
    assert "cooperative_pong" not in " ".join(ln for ln in listed.stdout.splitlines() if "needs" in ln)
    trained = subprocess.run(
        [sys.executable, "-c", block, "train", "pistonball", f"log.root={tmp_path}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert trained.returncode == 1 and "pip install 'marl-ppo[butterfly]'" in trained.stderr.strip().splitlines()[-1]
