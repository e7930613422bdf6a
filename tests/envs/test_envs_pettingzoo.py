"""Any PettingZoo env by import path, agents that leave early, exact evaluation counts, connect four.

Covered, on real envs at tiny sizes:

* Knights-Archers-Zombies (``pettingzoo.butterfly.knights_archers_zombies_v11``, vector state,
  ``line_death`` so that agents die within a few steps) through ``marl-ppo train`` and ``eval``;
  on a collected batch, agents die while the episode goes on, and their steps get no advantage,
  a value target equal to the value, and no weight in any loss;
* a second family by import path, ``pettingzoo.sisl.pursuit_v5`` (its ``[7, 7, 3]`` local grid
  flattened to 147 floats per agent);
* an image under model.kind=mlp refused with the group, key, shape and `cnn`; a module that needs a missing package, a
  misspelt version and a module that is not an env each named in a ConfigError; none leaves a
  run directory;
* ``marl-ppo eval --episodes 20`` on PettingZoo reports and averages exactly 20 episodes;
* connect four trains with ``configs/connect_four_two_groups.yaml``;
* every copy of a game is seeded within 31 bits, and hanabi (OpenSpiel) trains whatever the seed.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from torchrl.collectors import Collector

from marl_ppo.cli import main
from marl_ppo.config import ConfigError, load_config
from marl_ppo.groups.reward_table import RewardTableError
from marl_ppo.run.build import build
from marl_ppo.run.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
KAZ = "pettingzoo.butterfly.knights_archers_zombies_v11"
TINY = [
    "env.num_envs=2",
    "env.continuous_actions=false",
    "train.num_epochs=1",
    "train.num_threads=1",
    "model.hidden=[16]",
    "log.eval_every=0",
    "log.eval_episodes=2",
    "log.progress=false",
    "log.plot=false",
]
KAZ_TINY = TINY + [
    "env.kind=pettingzoo",
    f"env.scenario={KAZ}",
    "env.kwargs={line_death: true, max_zombies: 4, max_arrows: 4}",  # agents die at the walls
    "env.max_steps=40",
    "train.frames_per_batch=80",
    "train.total_frames=160",
    "train.minibatch_size=40",
]


@pytest.mark.slow
def test_kaz_trains_and_evaluates_through_the_cli(tmp_path, capsys):
    assert main(["train", *KAZ_TINY, f"log.root={tmp_path}", "log.name=kaz"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("{\n") :])
    assert summary["iteration"] == 2 and summary["frames"] == 160
    assert "archer  [2 agents]" in out and "knight  [2 agents]" in out  # grouped by name prefix
    assert main(["eval", str(tmp_path / "kaz"), "--episodes", "3"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 3
    assert set(result["episode_reward"]) == {"archer", "knight"}
    assert all(math.isfinite(v) for v in result["episode_reward"].values())


def test_kaz_agents_that_die_are_masked_out_of_advantages_and_losses():
    parts = build(load_config(overrides=KAZ_TINY))
    assert {g: s.observation_shape for g, s in parts.groups.items()} == {"archer": (2, 75), "knight": (2, 75)}
    collector = Collector(
        parts.env, parts.router.policy, frames_per_batch=80, total_frames=80, auto_register_policy_transforms=False
    )
    batch = parts.reward_table(next(iter(collector)))
    collector.shutdown()
    parts.router.compute_advantages(batch)
    episode_goes_on = ~batch["next", "done"]  # [B, T, 1]
    died_mid_episode = 0
    for g in parts.groups:
        present = batch[g, "mask"]  # [B, T, n_agents]: False once the agent has left
        died_mid_episode += int((~present & episode_goes_on).sum())
        absent = ~present
        if absent.any():
            assert batch[g, "advantage"][absent].abs().max() == 0
            assert torch.equal(batch[g, "value_target"][absent], batch[g, "state_value"][absent])
    assert died_mid_episode > 0, "no agent left before the end of its episode: the test shows nothing"

    flat = batch.reshape(-1)
    base = parts.router(flat)

    def losses_with_shift(where_present: bool):
        td = flat.clone()
        for g in parts.groups:
            where = td[g, "mask"] if where_present else ~td[g, "mask"]
            td[g, "action_log_prob"] = torch.where(where, td[g, "action_log_prob"] - 0.5, td[g, "action_log_prob"])
            for key in ("advantage", "value_target"):  # what the objective and the critic loss read
                td[g, key] = torch.where(where.unsqueeze(-1), td[g, key] + 1.0, td[g, key])
        return parts.router(td)

    shifted_absent = losses_with_shift(where_present=False)
    for g in parts.groups:
        for term in ("loss_objective", "loss_critic", "loss_entropy"):
            assert torch.allclose(shifted_absent[g, term], base[g, term], atol=1e-6), (g, term)
    shifted_present = losses_with_shift(where_present=True)
    for term in ("loss_objective", "loss_critic"):
        assert not torch.allclose(shifted_present["archer", term], base["archer", term]), term


def test_pursuit_by_import_path_trains(tmp_path):
    cfg = load_config(
        overrides=TINY
        + [
            "env.kind=pettingzoo",
            "env.scenario=pettingzoo.sisl.pursuit_v5",
            "env.kwargs={n_pursuers: 2, n_evaders: 2, x_size: 8, y_size: 8}",
            "env.max_steps=10",
            "train.frames_per_batch=40",
            "train.total_frames=40",
            "train.minibatch_size=20",
        ]
    )
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    group = trainer.parts.groups["pursuer"]
    assert group.n_agents == 2 and group.observation_shape == (2, 7 * 7 * 3)
    summary = trainer.fit()
    assert summary["iteration"] == 1 and summary["eval/episodes"] == 2
    assert math.isfinite(summary["eval/pursuer/episode_reward"])


@pytest.mark.parametrize(
    "scenario, kwargs, error, expected",
    [
        (
            KAZ,
            "{obs_method: image}",
            ConfigError,
            ["group 'archer'", "('archer', 'observation') has per-agent shape [512, 512, 3]", "model.kind=cnn"],
        ),
        ("pettingzoo.sisl.pursuit_v4", "{}", ConfigError, ["cannot import 'pettingzoo.sisl.pursuit_v4'", "pursuit_v5"]),
        ("pettingzoo.utils", "{}", ConfigError, ["has neither parallel_env nor env"]),
        (KAZ, "{colour: red}", ConfigError, ["env.kwargs ['colour'] are not parameters", KAZ, "'num_archers'"]),
    ],
    ids=["image", "wrong-version", "not-an-env-module", "bad-kwarg"],
)
def test_bad_pettingzoo_env_fails_before_a_run_directory(tmp_path, scenario, kwargs, error, expected):
    cfg = load_config(
        overrides=TINY
        + ["env.kind=pettingzoo", f"env.scenario={scenario}", f"env.kwargs={kwargs}", f"log.root={tmp_path / 'runs'}"]
    )
    with pytest.raises(error) as info:
        Trainer(cfg)
    for text in expected:
        assert text in str(info.value), (text, str(info.value))
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "package, scenario, extra",
    [
        ("pymunk", "pettingzoo.butterfly.pistonball_v6", "butterfly"),
        ("magent2", "magent2.environments.battle_v4", "magent2"),
    ],
)
def test_missing_family_package_names_the_extra(monkeypatch, package, scenario, extra):
    # installed by the test extra: made unimportable here, and the family imported afresh
    monkeypatch.setitem(sys.modules, package, None)
    for name in [m for m in sys.modules if m.startswith(("pettingzoo.butterfly", "magent2."))]:
        monkeypatch.delitem(sys.modules, name)
    cfg = load_config(overrides=TINY + ["env.kind=pettingzoo", f"env.scenario={scenario}"])
    with pytest.raises(ConfigError, match=rf"'{package}' is not installed: pip install 'marl-ppo\[{extra}\]'"):
        Trainer(cfg)


@pytest.mark.slow
def test_pettingzoo_eval_runs_exactly_the_requested_episodes(tmp_path, capsys):
    overrides = [
        "env.num_envs=3",
        "train.frames_per_batch=30",
        "train.total_frames=30",
        "train.num_epochs=1",
        "train.minibatch_size=15",
        "train.num_threads=1",
        "model.hidden=[16]",
        "log.eval_every=0",
        "log.eval_episodes=4",
        "log.progress=false",
        "log.plot=false",
    ]
    assert (
        main(
            [
                "train",
                str(ROOT / "configs" / "tictactoe_two_groups.yaml"),
                *overrides,
                f"log.root={tmp_path}",
                "log.name=ttt",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "ttt"), "--episodes", "20"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 20  # 3 copies: 7 + 7 + 6 games, not min(20, copies)
    for value in result["episode_reward"].values():  # each game pays -1, 0 or 1: a mean over 20 is k / 20
        assert value * 20 == pytest.approx(round(value * 20), abs=1e-4)


def test_connect_four_trains_with_its_own_config(tmp_path):
    overrides = [
        "env.num_envs=2",
        "train.frames_per_batch=40",
        "train.total_frames=40",
        "train.num_epochs=1",
        "train.minibatch_size=20",
        "train.num_threads=1",
        "model.hidden=[16]",
        "log.eval_every=0",
        "log.eval_episodes=2",
        "log.progress=false",
        "log.plot=false",
    ]
    trainer = Trainer(
        load_config(ROOT / "configs" / "connect_four_two_groups.yaml", overrides), run_dir=tmp_path / "run"
    )
    assert list(trainer.parts.groups) == ["player_0", "player_1"]
    assert trainer.fit()["iteration"] == 1
    # the tic-tac-toe config names tic-tac-toe's players: the error says which groups exist
    with pytest.raises(RewardTableError, match="player_2"):
        Trainer(
            load_config(ROOT / "configs" / "tictactoe_two_groups.yaml", overrides + ["env.scenario=connect_four_v3"]),
            run_dir=tmp_path / "other",
        )
    assert not (tmp_path / "other").exists()


def test_registry_id_builds_the_same_env():
    from marl_ppo.envs import make_env

    cfg = load_config(
        overrides=TINY
        + [
            "env.kind=pettingzoo",
            "env.scenario=sisl/pursuit-v5",
            "env.max_steps=6",
            "env.kwargs={n_pursuers: 2, n_evaders: 2, x_size: 8, y_size: 8}",
        ]
    )
    env = make_env(cfg.env, seed=0)
    assert env.observation_spec["pursuer", "observation"].shape == (2, 2, 147)
    td = env.rollout(6, break_when_any_done=False)
    assert td["next", "done"][:, -1].all()  # env.max_steps reached the game as max_cycles
    with pytest.raises(ConfigError, match=r"unknown PettingZoo registry id 'sisl/pursuit-v4'; did you mean"):
        make_env(load_config(overrides=["env.kind=pettingzoo", "env.scenario=sisl/pursuit-v4"]).env)


@pytest.mark.parametrize("scenario", ["rps_v2", "classic/rps-v2", "pettingzoo.classic.rps_v2"])
def test_a_classic_games_seats_are_their_own_groups_however_the_game_is_named(scenario):
    """Rock-paper-scissors is zero-sum: its two players in one group `player` would log the mean of their
    returns, exactly 0. Each seat is its own group by default (by short name, registry id or import path),
    so each player's return is logged; `group_map: all_in_one_group` still puts them together."""
    cfg = load_config(overrides=[*TINY, "env.kind=pettingzoo", f"env.scenario={scenario}", "env.kwargs={}"])
    assert list(build(cfg).groups) == ["player_0", "player_1"]
    together = load_config(
        overrides=[*TINY, "env.kind=pettingzoo", f"env.scenario={scenario}", "env.kwargs={group_map: all_in_one_group}"]
    )
    assert list(build(together).groups) == ["agents"]


def test_every_copy_of_a_game_is_seeded_within_31_bits():
    """torchrl chains a batched env's seeds through 32 bits (``seed_generator``); engines such as
    OpenSpiel's take a C++ int, so each copy's game gets its chained seed modulo 2**31."""
    from torchrl._utils import seed_generator

    from marl_ppo.envs.pettingzoo import make_pettingzoo

    cfg = load_config(overrides=[*TINY, "env.kind=pettingzoo", "env.scenario=tictactoe_v3"]).env
    env = make_pettingzoo(cfg, seed=2**31 - 1, num_envs=3, lean=False)  # AecGames: tests/envs/test_aec_games.py
    chained = [2**31 - 1]
    for _ in range(2):
        chained.append(seed_generator(chained[-1]))
    assert max(chained) >= 2**31  # the chain leaves 31 bits: what the games would have been handed
    assert [copy.base_env.seed if hasattr(copy, "base_env") else copy.seed for copy in env._envs] == [
        s % 2**31 for s in chained
    ]
    env.close()


@pytest.mark.skipif(importlib.util.find_spec("open_spiel") is None, reason="hanabi needs open_spiel")
@pytest.mark.parametrize("seed", [1, 2**31 - 1])
def test_hanabi_trains_whatever_the_run_seed(tmp_path, seed):
    """Before: a pybind cast error from any seed whose chain reached 2**31 (train.seed=1 with two copies)."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "marl_ppo.cli", "train", *TINY, "env.kind=pettingzoo", "env.scenario=hanabi_v5"]
    cmd += ["env.max_steps=10", "train.frames_per_batch=20", "train.minibatch_size=20", "train.total_frames=20"]
    cmd += [f"train.seed={seed}", "log.eval_episodes=1", f"log.root={tmp_path}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (run,) = tmp_path.iterdir()
    assert json.loads((run / "summary.json").read_text())["frames"] == 20


@pytest.mark.parametrize("scenario", ["tictactoe_v3", "simple_spread_v3"])
def test_the_wrappers_step_reads_the_games_agents_without_torchrls_getattr_fallback(monkeypatch, scenario):
    """torchrl's PettingZooWrapper reads agents / agent_selection / possible_agents of the game several
    times a step; through EnvBase.__getattr__ each read lists dir(self) twice (20 % of a tic-tac-toe
    run). The adapter's wrapper reads them directly: a rollout falls back to __getattr__ for none."""
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    from marl_ppo.config import EnvConfig
    from marl_ppo.envs.pettingzoo import make_pettingzoo

    kwargs = {"N": 2} if scenario.startswith("simple") else {}
    cfg = EnvConfig(kind="pettingzoo", scenario=scenario, num_envs=2, max_steps=10, kwargs=kwargs)
    env = make_pettingzoo(cfg, seed=0, num_envs=2, lean=False)  # the wrappers, not AecGames
    owner = next(c for c in PettingZooWrapper.__mro__ if "__getattr__" in vars(c))  # torchrl's env wrapper base
    reads: list[str] = []
    fallback = owner.__getattr__

    def counted(self, attr):
        reads.append(attr)
        return fallback(self, attr)

    monkeypatch.setattr(owner, "__getattr__", counted)
    td = env.rollout(12, break_when_any_done=False)
    assert td.batch_size == (2, 12)
    assert not [a for a in reads if a in ("agents", "agent_selection", "possible_agents")], sorted(set(reads))
    env.close()
