"""Tests for :mod:`marl_ppo.config`: YAML files, ``key=value`` overrides, errors, round-trips.

Covered:

* every YAML in ``configs/`` loads into the dataclasses (each value in the file lands on the
  matching attribute), names a scenario that exists, and its ``reward_table`` (if any) parses
  with :meth:`RewardTable.from_dict`;
* overrides apply with the dataclass types (int, float, bool, list, dict, str);
* an unknown key raises :class:`ConfigError` naming the key and suggesting the close one; a wrong
  type names the key; a bad choice names the allowed values;
* a file's ``env.kwargs`` replace the default kwargs (no ``n_agents`` leaking into other scenarios);
* ``to_yaml`` / ``from_yaml`` round-trip to an equal :class:`Config`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
import yaml

from marl_ppo import RewardTable
from marl_ppo.config import (
    Config,
    ConfigError,
    EnvConfig,
    LogConfig,
    LossConfig,
    ModelConfig,
    TrainConfig,
    from_yaml,
    load_config,
    to_yaml,
)
from marl_ppo.envs.kinds import env_kind

ROOT = Path(__file__).resolve().parents[2]
CONFIG_FILES = sorted((ROOT / "configs").glob("*.yaml")) + sorted((ROOT / "configs" / "tuned").glob("*.yaml"))


def make_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    return load_config(path, overrides=list(overrides or []))


def _assert_values_landed(raw, obj, where: str) -> None:
    """Every leaf of the YAML mapping ``raw`` equals the matching attribute / entry of ``obj``."""
    for key, value in raw.items():
        target = obj[key] if isinstance(obj, dict) else getattr(obj, key)
        if isinstance(value, dict) and is_dataclass(target):
            _assert_values_landed(value, target, f"{where}.{key}")
        else:
            assert target == value, f"{where}.{key}: file says {value!r}, config has {target!r}"


# -- the YAML files ---------------------------------------------------------------------------------


def test_there_are_config_files():
    names = {p.name for p in CONFIG_FILES}
    assert {"navigation.yaml", "balance.yaml", "simple_tag.yaml", "simple_spread.yaml"} <= names


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_config_file_loads_into_dataclasses(path):
    cfg = make_config(path)
    assert isinstance(cfg, Config)
    for f, cls in zip(
        ("env", "model", "loss", "train", "log"),
        (EnvConfig, ModelConfig, LossConfig, TrainConfig, LogConfig),
    ):
        assert type(getattr(cfg, f)) is cls
    raw = yaml.safe_load(path.read_text())
    _assert_values_landed(raw, cfg, path.name)
    known = env_kind(cfg.env.kind).scenario_names()
    if cfg.env.kind == "pettingzoo" and "." in cfg.env.scenario:  # an env module by import path
        assert importlib.util.find_spec(cfg.env.scenario) is not None, cfg.env.scenario
    else:
        assert cfg.env.scenario in known
    assert cfg.train.iterations >= 1


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_config_file_reward_table_parses(path):
    cfg = make_config(path)
    raw = yaml.safe_load(path.read_text())
    if cfg.reward_table is None:
        assert "reward_table" not in raw or raw["reward_table"] is None
        return
    table = RewardTable.from_dict(cfg.reward_table)
    assert set(table.rows) == set(raw["reward_table"])
    for group, row in table.rows.items():
        assert len(row.reward) >= 1
        declared = raw["reward_table"][group]
        if isinstance(declared, dict) and "done" in declared:
            assert row.done == declared["done"]
    # the dict form survives its inverse
    assert RewardTable.from_dict(table.to_dict()) == table


def test_simple_tag_file_shares_a_team_reward():
    table = RewardTable.from_dict(make_config(ROOT / "configs" / "simple_tag.yaml").reward_table)
    sources = [(t.source, t.weight, t.groups, t.reduce) for t in table.rows["adversary"].reward]
    assert sources == [("own", 0.5, (), "none"), ("team", 0.5, ("adversary",), "mean")]
    assert table.rows["adversary"].done == "root"


def test_missing_config_file():
    with pytest.raises(ConfigError, match="does not exist"):
        make_config("no/such/config.yaml")


# -- overrides ----------------------------------------------------------------------------------------


def test_defaults_without_file():
    cfg = make_config()
    assert cfg == Config()
    assert cfg.env.scenario == "navigation" and cfg.env.kwargs == {"n_agents": 3}


def test_overrides_apply_with_types():
    cfg = make_config(
        overrides=[
            "train.lr=1e-3",
            "train.total_frames=12000",
            "env.num_envs=8",
            "env.continuous_actions=false",
            "model.hidden=[32,16]",
            "log.progress=false",
            "log.name=my-run",
            "loss.group_weights={agents: 0.5}",
            "env.kwargs.n_agents=2",
            "train.lr_schedule=linear",
        ]
    )
    assert cfg.train.lr == pytest.approx(1e-3) and type(cfg.train.lr) is float
    assert cfg.train.total_frames == 12000 and type(cfg.train.total_frames) is int
    assert cfg.env.num_envs == 8 and type(cfg.env.num_envs) is int
    assert cfg.env.continuous_actions is False
    assert cfg.model.hidden == [32, 16] and all(type(h) is int for h in cfg.model.hidden)
    assert cfg.log.progress is False
    assert cfg.log.name == "my-run" and cfg.run_name() == "my-run"
    assert cfg.loss.group_weights == {"agents": 0.5}
    assert cfg.env.kwargs == {"n_agents": 2}
    assert cfg.train.lr_schedule == "linear"
    # untouched fields keep their defaults
    assert cfg.train.seed == TrainConfig().seed and cfg.loss.algorithm == "mappo"


def test_int_given_for_float_field_becomes_float():
    cfg = make_config(overrides=["train.lr=1"])
    assert cfg.train.lr == 1.0 and type(cfg.train.lr) is float


def test_overrides_apply_on_top_of_a_file():
    cfg = make_config(ROOT / "configs" / "simple_spread.yaml", ["env.kwargs.N=2", "train.seed=7"])
    assert cfg.env.kwargs == {"N": 2}
    assert cfg.train.seed == 7 and cfg.env.scenario == "simple_spread_v3"


def test_override_without_equals_sign():
    with pytest.raises(ConfigError, match="key=value"):
        make_config(overrides=["train.lr"])


@pytest.mark.parametrize(
    "override, key, suggestion",
    [
        ("train.lr_rate=1e-3", "train.lr_rate", "train.lr"),
        ("env.num_envz=3", "env.num_envz", "env.num_envs"),
        ("log.eval_episode=3", "log.eval_episode", "log.eval_episodes"),
        ("model.hiden=[8]", "model.hiden", "model.hidden"),
    ],
)
def test_unknown_key_names_it_and_suggests(override, key, suggestion):
    with pytest.raises(ConfigError) as info:
        make_config(overrides=[override])
    msg = str(info.value)
    assert "unknown config key" in msg
    assert repr(key) in msg
    assert f"did you mean {suggestion!r}" in msg


def test_unknown_key_in_a_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  num_epoch: 3\n")
    with pytest.raises(ConfigError) as info:
        make_config(path)
    msg = str(info.value)
    assert "num_epoch" in msg and "did you mean 'train.num_epochs'" in msg


@pytest.mark.parametrize(
    "override, key",
    [
        ("env.num_envs=abc", "env.num_envs"),
        ("train.lr=fast", "train.lr"),
        ("log.progress=maybe", "log.progress"),
        ("train.total_frames=1.5e3x", "train.total_frames"),
    ],
)
def test_wrong_type_names_the_key(override, key):
    with pytest.raises(ConfigError) as info:
        make_config(overrides=[override])
    assert repr(key) in str(info.value)


@pytest.mark.parametrize(
    "override, allowed",
    [
        ("env.kind=foo", ["vmas", "pettingzoo"]),
        ("loss.algorithm=xyz", ["mappo", "ippo", "clip_ppo"]),
        ("model.activation=sigmoid", ["tanh", "relu", "elu", "gelu", "silu"]),
        ("train.lr_schedule=cosine", ["constant", "linear"]),
        ("loss.loss_critic_type=huber", ["l2", "l1", "smooth_l1"]),
    ],
)
def test_bad_choice_names_allowed_values(override, allowed):
    key, bad = override.split("=")
    with pytest.raises(ConfigError) as info:
        make_config(overrides=[override])
    msg = str(info.value)
    assert key in msg and repr(bad) in msg
    for value in allowed:
        assert repr(value) in msg


@pytest.mark.parametrize(
    "key", ["train.total_frames", "train.frames_per_batch", "train.num_epochs", "train.minibatch_size", "env.num_envs"]
)
def test_non_positive_sizes_are_rejected(key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + " must be >= 1"):
        make_config(overrides=[f"{key}=0"])


def test_iterations_round_up():
    cfg = make_config(
        overrides=[
            "train.total_frames=100",
            "train.frames_per_batch=40",
            "env.num_envs=4",
            "env.max_steps=10",
            "train.minibatch_size=40",
        ]
    )
    assert cfg.train.iterations == 3


# -- env.kwargs from a file ----------------------------------------------------------------------------


def test_file_kwargs_replace_default_kwargs():
    spread = make_config(ROOT / "configs" / "simple_spread.yaml")
    assert spread.env.kwargs == {"N": 3}
    assert "n_agents" not in spread.env.kwargs
    tag = make_config(ROOT / "configs" / "simple_tag.yaml")
    assert tag.env.kwargs == {}


def test_file_without_kwargs_keeps_default_kwargs(tmp_path):
    path = tmp_path / "nav.yaml"
    path.write_text("env:\n  num_envs: 4\n")
    cfg = make_config(path)
    assert cfg.env.num_envs == 4 and cfg.env.kwargs == {"n_agents": 3}


def test_empty_file_kwargs_replace_defaults(tmp_path):
    path = tmp_path / "tag.yaml"
    path.write_text("env:\n  scenario: simple_tag\n  kwargs: {}\n")
    assert make_config(path).env.kwargs == {}


def test_new_scenario_without_kwargs_drops_the_other_scenarios_kwargs(tmp_path):
    # `env.scenario=balance` alone must not run balance with navigation's n_agents
    assert make_config(overrides=["env.scenario=balance"]).env.kwargs == {}
    path = tmp_path / "balance.yaml"
    path.write_text("env:\n  scenario: balance\n")
    assert make_config(path).env.kwargs == {}
    # same scenario: the kwargs stay; dotted overrides add to them; kwargs given with the scenario are used
    assert make_config(overrides=["env.scenario=navigation"]).env.kwargs == {"n_agents": 3}
    assert make_config(ROOT / "configs" / "simple_spread.yaml", ["env.kwargs.local_ratio=0.3"]).env.kwargs == {
        "N": 3,
        "local_ratio": 0.3,
    }
    assert make_config(overrides=["env.scenario=balance", "env.kwargs.n_agents=5"]).env.kwargs == {"n_agents": 5}


def test_num_threads_must_not_be_negative():
    with pytest.raises(ConfigError, match="train.num_threads must be >= 0"):
        make_config(overrides=["train.num_threads=-1"])


# -- YAML round-trip -----------------------------------------------------------------------------------


def test_round_trip_default_and_overridden():
    for cfg in (
        make_config(),
        make_config(
            overrides=[
                "train.lr=1e-3",
                "model.hidden=[32,32]",
                "log.name=x",
                "loss.group_weights={agents: 0.5}",
                "env.kwargs.n_agents=2",
            ]
        ),
    ):
        back = from_yaml(to_yaml(cfg))
        assert back == cfg
        assert to_yaml(back) == to_yaml(cfg)


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_round_trip_config_files(path):
    cfg = make_config(path)
    back = from_yaml(to_yaml(cfg))
    assert back.env.kwargs == cfg.env.kwargs, "from_yaml must not merge the default env.kwargs into the file's"
    assert back == cfg


def test_round_trip_with_a_reward_table():
    cfg = make_config(ROOT / "configs" / "simple_tag.yaml", ["train.seed=3"])
    back = from_yaml(to_yaml(cfg))
    assert back.reward_table == cfg.reward_table
    assert RewardTable.from_dict(back.reward_table) == RewardTable.from_dict(cfg.reward_table)


def test_resolved_yaml_reloads_through_load_config(tmp_path):
    """The run directory's ``config.yaml`` is read back with ``load_config`` on resume."""
    for path in CONFIG_FILES:
        cfg = make_config(path, ["train.seed=5"])
        out = tmp_path / path.name
        out.write_text(to_yaml(cfg))
        assert make_config(out) == cfg, path.name


def test_every_config_field_is_in_the_yaml():
    text = to_yaml(Config())
    loaded = yaml.safe_load(text)
    for f in fields(Config):
        assert f.name in loaded
        sub = getattr(Config(), f.name)
        if is_dataclass(sub):
            assert set(loaded[f.name]) == {g.name for g in fields(sub)}
