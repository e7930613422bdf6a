"""Cross-play on real runs: ``marl-ppo eval RUN --partner OTHER`` and ``marl-ppo crossplay RUN...``.

Tiny runs of VMAS navigation (one group of two agents: the seats are its agents) as one ``train.seeds``
group of three seeds, and tiny tic-tac-toe runs (two groups: the seats are the groups). A run beside
itself plays exactly its own evaluation (the matrix's diagonal is each run's ``marl-ppo eval``); the
matrix, its scores and its figure; the refusals, one line each; the scores' intervals on fixed numbers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from marl_ppo.cli import main
from marl_ppo.run.crossplay import AgentSplit, Seating, same_groups, self_cross_gap
from marl_ppo.run.crossplay_cli import run_directories
from tests.conftest import TINY

TTT = [
    "env.num_envs=2",
    "train.frames_per_batch=40",
    "train.total_frames=80",
    "train.num_epochs=1",
    "train.minibatch_size=20",
    "model.hidden=[16]",
    "log.eval_every=0",
    "log.checkpoint_every=1",
    "log.progress=false",
    "log.plot=false",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``{"nav": [3 seeds' dirs], "group": the seeds' group dir, "ttt": [2 dirs], "ttt_random": a run whose
    player_2 is random}``."""
    root = tmp_path_factory.mktemp("crossplay")
    assert main(["train", *TINY, "train.seeds=[0,1,2]", f"log.root={root / 'nav'}"]) == 0
    for seed in (0, 1):
        assert main(["train", "tictactoe_two_groups", *TTT, f"train.seed={seed}", f"log.root={root / 'ttt'}"]) == 0
    assert main(["train", "tictactoe_two_groups", *TTT, "opponents={player_2: random}", f"log.root={root}/r"]) == 0
    nav = sorted(p.parent for p in (root / "nav").glob("*/config.yaml"))
    return {
        "nav": nav,
        "group": next((root / "nav").glob("*-seeds")),
        "ttt": sorted(p.parent for p in (root / "ttt").glob("*/config.yaml")),
        "ttt_random": next((root / "r").glob("*/config.yaml")).parent,
    }


def _json(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)


def _refused(capsys, *argv) -> str:
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_run_beside_itself_plays_exactly_its_own_evaluation(runs, capsys):
    for run, seats in ((runs["nav"][1], [[], ["--seat", "agents:1"]]), (runs["ttt"][0], [[], ["--seat", "player_2"]])):
        own = _json(capsys, "eval", run, "--episodes", 6)["episode_reward"]
        for seat in seats:
            beside = _json(capsys, "eval", run, "--partner", run, "--episodes", 6, *seat)
            assert beside["episode_reward"] == own and beside["episodes"] == 6  # bit for bit
    nav = _json(capsys, "eval", runs["nav"][0], "--partner", runs["nav"][0], "--episodes", 4)
    assert nav["seats"] == {"run": ["agents:0"], "partner": ["agents:1"]}  # one group: the run plays agent 0
    assert nav["team_return"] == pytest.approx(nav["episode_reward"]["agents"], rel=1e-6)
    summed = _json(capsys, "eval", runs["nav"][0], "--partner", runs["nav"][0], "--episodes", 4, "--team", "sum")
    assert summed["team_return"] == pytest.approx(2 * nav["team_return"]) and "sum" in summed["measure"]
    ttt = _json(capsys, "eval", runs["ttt"][0], "--partner", runs["ttt"][1], "--episodes", 4)
    assert ttt["seats"] == {"run": ["player_1"], "partner": ["player_2"]}  # two groups: the run plays the first
    assert ttt["team_return"] == pytest.approx(sum(ttt["episode_reward"].values()) / 2)  # zero-sum: 0


def test_a_partner_is_the_other_runs_checkpoint_opponent(runs, capsys):
    """Beside another run, the run's return in its seat is what ``--opponent checkpoint:OTHER`` scores there."""
    run, other = runs["ttt"]
    beside = _json(capsys, "eval", run, "--partner", other, "--seat", "player_2", "--episodes", 8)
    (match,) = _json(capsys, "eval", run, "--opponent", f"checkpoint:{other}", "--seat", "player_2", "--episodes", 8)[
        "matches"
    ]
    assert beside["episode_reward"]["player_2"] == pytest.approx(match["win_rate"] - match["loss_rate"])


def test_the_matrix_of_a_seed_group_its_scores_and_figure(runs, capsys, tmp_path):
    own = [_json(capsys, "eval", d, "--episodes", 3)["episode_reward"]["agents"] for d in runs["nav"]]
    out = _json(capsys, "crossplay", runs["group"], "--episodes", 3, "--out", tmp_path)  # the group's directory
    assert out["runs"] == [str(d.resolve()) for d in runs["nav"]]
    result = json.loads((tmp_path / "crossplay.json").read_text())
    m = np.asarray(result["matrix"])
    assert m.shape == (3, 3) and result["seats"] == {"run": ["agents:0"], "partner": ["agents:1"]}
    assert np.diag(m) == pytest.approx(own, rel=1e-6)  # the diagonal: each run's own evaluation
    assert [[c["n"] for c in row] for row in result["cells"]] == [[3] * 3] * 3
    assert all(set(c) == {"mean", "sd", "n", "groups"} for row in result["cells"] for c in row)
    off = m[~np.eye(3, dtype=bool)]
    assert result["self_play"]["mean"] == pytest.approx(np.diag(m).mean())
    assert result["cross_play"]["mean"] == pytest.approx(off.mean())
    assert result["gap"]["mean"] == pytest.approx(np.diag(m).mean() - off.mean())
    for key in ("self_play", "cross_play", "gap"):
        low, high = result[key]["ci95"]
        assert (
            low <= result[key]["mean"] + 1e-12
            and result[key]["mean"] <= high + 1e-12
            and len(result[key]["per_run"]) == 3
        )
    assert "Other-Play" in result["reference"] and "team return" in result["measure"]
    assert all((tmp_path / f"crossplay.{ext}").stat().st_size > 0 for ext in ("png", "svg"))
    assert out["files"] == [str(tmp_path / f"crossplay.{ext}") for ext in ("json", "png", "svg")]


def test_runs_are_given_as_directories_a_glob_a_group_or_one_seed_of_it(runs):
    nav = [d.resolve() for d in runs["nav"]]
    assert run_directories([str(runs["nav"][0].parent / "*-seed[0-9]")]) == nav  # a quoted glob
    assert run_directories([runs["group"]]) == nav
    assert run_directories([runs["nav"][2]]) == nav  # one seed of a train.seeds group: the group
    assert run_directories(runs["nav"][:2]) == nav[:2]


def test_refusals_in_one_line(runs, capsys, tmp_path):
    nav, (ttt, ttt2) = runs["nav"], runs["ttt"]
    line = _refused(capsys, "crossplay", nav[0], ttt, "--out", tmp_path)
    assert "are not of one env: env.kind is 'vmas' in the first, 'pettingzoo' in the second" in line
    line = _refused(capsys, "eval", ttt, "--partner", runs["ttt_random"], "--episodes", 2)
    assert line.endswith("trained no group 'player_2'; it trained ['player_1']")
    line = _refused(capsys, "eval", ttt, "--partner", ttt2, "--seat", "player_1", "--seat", "player_2")
    assert "the run would play every agent and its partner none" in line
    assert "--seat 'agents:5': group 'agents' has agents 0..1" in _refused(
        capsys, "eval", nav[0], "--partner", nav[1], "--seat", "agents:5"
    )
    assert "the env's groups are ['player_1', 'player_2']" in _refused(
        capsys, "eval", ttt, "--partner", ttt2, "--seat", "nobody"
    )
    assert "cross-play needs two runs or more" in _refused(capsys, "crossplay", ttt)
    assert "do not go together" in _refused(capsys, "eval", ttt, "--partner", ttt2, "--opponent", "random")
    # different groups (no two configs of one env make them: read from two envs' specs)
    from marl_ppo.config import load_config
    from marl_ppo.run.build import build

    one = build(load_config(overrides=TINY))  # navigation's one group
    two = build(load_config("tictactoe_two_groups", TTT))
    with pytest.raises(Exception, match=r"runs a and b have different groups: \['agents'\] and \['player_1', 'p"):
        same_groups([("a", one.groups), ("b", two.groups)])
    one.env.close(), two.env.close()


def test_an_agent_split_plays_each_agent_from_its_own_side():
    def writes(value):
        return TensorDictModule(lambda obs: obs * 0 + value, in_keys=[("g", "obs")], out_keys=[("g", "action")])

    td = TensorDict({"g": TensorDict({"obs": torch.ones(2, 3, 1)}, [2, 3])}, [2])
    split = AgentSplit("g", writes(1.0), writes(2.0), [False, True, False])
    assert split(td)["g", "action"][..., 0].tolist() == [[2.0, 1.0, 2.0]] * 2


def test_the_scores_and_their_intervals_on_fixed_numbers():
    # per run: self [4, 2, 5]; cross (row and column off the diagonal) [(1+0+3+2)/4, (3+1+1+2)/4, (2+2+0+1)/4]
    scores = self_cross_gap([[4.0, 1.0, 0.0], [3.0, 2.0, 1.0], [2.0, 2.0, 5.0]])
    assert scores["self_play"]["per_run"] == [4.0, 2.0, 5.0] and scores["self_play"]["mean"] == pytest.approx(11 / 3)
    assert scores["cross_play"]["per_run"] == [1.5, 1.75, 1.25] and scores["cross_play"]["mean"] == 1.5
    assert scores["gap"]["per_run"] == [2.5, 0.25, 3.75] and scores["gap"]["mean"] == pytest.approx(11 / 3 - 1.5)
    # gaps [0, 0, 1]: a percentile bootstrap would give their range [0, 1] (each extreme resample has chance
    # 1/27 > 2.5 %); Student's t at 3 runs: 1/3 +- 4.302653 * sd / sqrt(3), sd = sqrt(1/3)
    scores = self_cross_gap([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 2.0]])
    half = 4.302653 * (1 / 3) ** 0.5 / 3**0.5
    assert scores["gap"]["per_run"] == [0.0, 0.0, 1.0] and scores["gap"]["method"] == "t"
    assert scores["gap"]["ci95"] == pytest.approx([1 / 3 - half, 1 / 3 + half])
    assert scores["self_play"]["ci95"] == pytest.approx([4 / 3 - half, 4 / 3 + half])
    assert scores["cross_play"]["ci95"] == [1.0, 1.0]  # all equal
    two = self_cross_gap([[1.0, 0.0], [0.5, 3.0]])  # two runs: no interval, as a seed group's
    assert two["gap"]["ci95"] is None and "too few seeds" in two["gap"]["no_interval"]
    assert Seating.parse({"g": _Spec(3)}, None).labels(False) == ["g:1", "g:2"]
    with pytest.raises(ValueError, match="square"):
        self_cross_gap([[1.0]])


class _Spec:
    def __init__(self, n: int) -> None:
        self.agents = tuple(f"a{k}" for k in range(n))
        self.n_agents = n
