"""Custom envs through the config, the CLI, eval, resume and ``Trainer(cfg, env_fn=...)``.

The env is ``tests/envs/custom_envs.py``'s ``DepotEnv``: a group ``crew`` with a composite action
``{move, pick}`` and a group ``scout`` with a plain categorical one. Covered:

* ``marl-ppo train env.kind=custom env.factory=tests/envs/custom_envs.py:make_depot`` in a subprocess,
  then ``marl-ppo eval RUN`` and ``marl-ppo train --resume RUN`` from another folder (the run
  directory alone names the factory);
* the same env through ``Trainer(cfg, env_fn=make_depot)``, and ``load_policy`` of that run;
* the factory gets ``num_envs``/``seed``/``device``/``max_steps`` only where its signature names
  them (the evaluation env its own ``num_envs`` and ``seed``);
* every bad factory raises a ConfigError/GroupSpecError saying what was found and what is
  expected, and leaves no run directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import custom_envs
import pytest
import yaml

from marl_ppo.cli import main
from marl_ppo.config import ConfigError, load_config
from marl_ppo.envs import factory_path, make_env
from marl_ppo.envs.custom import factory_arguments
from marl_ppo.groups import GroupSpecError
from marl_ppo.run.build import load_policy
from marl_ppo.run.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "env.num_envs=4",
    "env.max_steps=8",
    "train.frames_per_batch=32",
    "train.total_frames=64",
    "train.num_epochs=1",
    "train.minibatch_size=16",
    "train.num_threads=1",
    "model.hidden=[16]",
    "log.eval_every=0",
    "log.eval_episodes=3",
    "log.progress=false",
    "log.plot=false",
]
CUSTOM = ["env.kind=custom", "env.factory=tests/envs/custom_envs.py:make_depot"]


def cli(*args: str, cwd: Path) -> str:
    """``python -m marl_ppo.cli ARGS`` in ``cwd``; its stdout (fails the test on a non-zero exit)."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "marl_ppo.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"marl-ppo {args[0]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow
def test_cli_train_eval_resume_from_the_run_directory_alone(tmp_path):
    out = cli("train", *CUSTOM, *TINY, f"log.root={tmp_path}", "log.name=depot", cwd=ROOT)
    run = tmp_path / "depot"
    assert "crew" in out and "scout" in out  # the reward table names both groups
    recorded = yaml.safe_load((run / "config.yaml").read_text())["env"]
    assert recorded["kind"] == "custom"
    # absolute: found from anywhere
    assert recorded["factory"] == f"{ROOT / 'tests' / 'envs' / 'custom_envs.py'}:make_depot"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = json.loads(cli("eval", str(run), "--episodes", "5", cwd=elsewhere))
    assert result["episodes"] == 5
    assert set(result["episode_reward"]) == {"crew", "scout"}
    out = cli("train", "--resume", str(run), "train.total_frames=96", cwd=elsewhere)
    summary = json.loads(out[out.index("{") :])
    assert summary["iteration"] == 3 and summary["frames"] == 96


def test_trainer_env_fn_records_the_factory_and_passes_what_the_signature_names(tmp_path):
    custom_envs.CALLS.clear()
    cfg = load_config(overrides=TINY + ["train.seed=7"])  # the defaults' VMAS kwargs do not reach the factory
    trainer = Trainer(cfg, run_dir=tmp_path / "run", env_fn=custom_envs.make_depot)
    assert trainer.cfg.env.kind == "custom" and trainer.cfg.env.factory == "custom_envs:make_depot"
    assert trainer.parts.groups["crew"].is_composite_action and not trainer.parts.groups["scout"].is_composite_action
    summary = trainer.fit()
    assert summary["iteration"] == 2 and summary["eval/episodes"] == 3
    train_call, eval_call = custom_envs.CALLS
    assert train_call == {
        "factory": "make_depot",
        "num_envs": 4,
        "seed": 7,
        "device": "cpu",
        "max_steps": 8,
        "n_types": 3,
    }
    assert eval_call["num_envs"] == 3 and eval_call["seed"] == 7 + 10_000  # the eval env: its own size and seed
    cfg2, parts = load_policy(tmp_path / "run")
    assert cfg2.env.factory == "custom_envs:make_depot" and list(parts.groups) == ["crew", "scout"]


def test_factory_without_system_arguments_gets_none(tmp_path):
    custom_envs.CALLS.clear()
    cfg = load_config(
        overrides=TINY + ["env.kind=custom", "env.factory=custom_envs:make_depot_fixed", "env.kwargs={n_types: 2}"]
    )
    env = make_env(cfg.env, seed=3)
    assert custom_envs.CALLS == [{"factory": "make_depot_fixed", "n_types": 2}]  # no num_envs/seed/device/max_steps
    assert env.batch_size == (3,)  # its own size, not env.num_envs
    assert env.full_action_spec["crew", "action", "pick"].space.n == 2


def test_factory_arguments_follow_the_signature():
    def everything(num_envs, device, seed, max_steps, size=1): ...

    def keyword_only(*, seed: int, size: int = 1): ...

    system = {"num_envs": 4, "device": "cpu", "seed": 1, "max_steps": 9}
    assert factory_arguments(everything, {"size": 2}, **system) == {"size": 2, **system}
    assert factory_arguments(keyword_only, {}, **system) == {"seed": 1}
    with pytest.raises(ConfigError, match=r"env.kwargs sets \['num_envs'\].*set them there"):
        factory_arguments(everything, {"num_envs": 2}, **system)
    with pytest.raises(ConfigError, match=r"env.kwargs \['colour'\] are not parameters of the factory keyword_only"):
        factory_arguments(keyword_only, {"colour": "red"}, **system)
    assert factory_path(custom_envs.make_depot) == "custom_envs:make_depot"
    assert factory_path(lambda: None) is None and factory_path(everything) is None  # cannot be found again


BROKEN = "raise RuntimeError('this module is broken')\n"


@pytest.mark.parametrize(
    "factory, error, expected",
    [
        (
            "no_such_module_xyz:make",
            ConfigError,
            [r"cannot import module 'no_such_module_xyz'", "sys.path", "path/to/file.py:callable"],
        ),
        (
            "custom_envs:make_nothing",
            ConfigError,
            ["module custom_envs has no attribute 'make_nothing'", "'make_depot'"],
        ),
        ("{tmp}/missing.py:make", ConfigError, ["no file", "missing.py"]),
        ("{tmp}/broken.py:make", ConfigError, ["broken.py raised RuntimeError: this module is broken"]),
        ("custom_envs", ConfigError, ["expected 'package.module:callable' or 'path/to/file.py:callable'"]),
        ("custom_envs:CALLS", ConfigError, ["CALLS is a list, not a callable"]),
        (
            "custom_envs:not_an_env",
            ConfigError,
            ["returned builtins.dict; expected a torchrl EnvBase with a group_map"],
        ),
        ("custom_envs:no_groups", GroupSpecError, ["custom_envs:no_groups", "_NoGroups has no group_map"]),
        ("custom_envs:unreadable_specs", GroupSpecError, ["group 'ghost' has no observation entry", "'crew'"]),
        (
            "custom_envs:image_observations",
            ValueError,
            [
                "group 'scout': model kind 'mlp' reads one flat vector per agent, but observation "
                "('scout', 'observation') has per-agent shape [3, 8, 8]; use model.kind=cnn (an image)"
            ],
        ),
        (None, ConfigError, ["env.kind=custom needs env.factory"]),
    ],
    ids=[
        "no-module",
        "no-attribute",
        "no-file",
        "file-raises",
        "no-colon",
        "not-callable",
        "not-an-env",
        "no-group-map",
        "unreadable-specs",
        "image",
        "no-factory",
    ],
)
def test_bad_factory_fails_before_a_run_directory(tmp_path, factory, error, expected):
    (tmp_path / "broken.py").write_text(BROKEN)
    overrides = TINY + ["env.kind=custom", f"log.root={tmp_path / 'runs'}"]
    if factory is not None:
        overrides.append(f"env.factory={factory.format(tmp=tmp_path)}")
    with pytest.raises(error) as info:
        Trainer(load_config(overrides=overrides))
    for text in expected:
        assert text in str(info.value), (text, str(info.value))
    assert not (tmp_path / "runs").exists()


def test_bad_factory_through_the_cli_prints_one_line_and_leaves_nothing(tmp_path, capsys):
    code = main(["train", "env.kind=custom", "env.factory=custom_envs:not_an_env", *TINY, f"log.root={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(
        "marl-ppo train: error: ConfigError: env factory custom_envs:not_an_env returned builtins.dict"
    )
    assert list(tmp_path.iterdir()) == []


def test_factory_needs_kind_custom():
    with pytest.raises(ConfigError, match=r"env.factory is set \('custom_envs:make_depot'\) but env.kind is 'vmas'"):
        load_config(overrides=["env.factory=custom_envs:make_depot"])


def test_unnamed_env_fn_warns_and_load_policy_takes_it_back(tmp_path):
    def local_factory(num_envs: int, seed: int) -> custom_envs.DepotEnv:  # a closure: no import path
        return custom_envs.DepotEnv(num_envs=num_envs, seed=seed)

    with pytest.warns(UserWarning, match="cannot be named in the run's config.yaml"):
        trainer = Trainer(load_config(overrides=TINY), run_dir=tmp_path / "run", env_fn=local_factory)
    trainer.fit()
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["env"]["factory"] is None
    with pytest.raises(ConfigError, match=r"needs that function again: load_policy\(run_dir, env_fn=\.\.\.\)"):
        load_policy(tmp_path / "run")
    _, parts = load_policy(tmp_path / "run", env_fn=local_factory)
    assert list(parts.groups) == ["crew", "scout"]


def test_run_names_come_from_the_env():
    names = {
        "env.kind=custom env.factory=tests/envs/custom_envs.py:make_depot": "make_depot-mappo-seed0",
        "env.kind=pettingzoo env.scenario=sisl/pursuit-v5": "pursuit-v5-mappo-seed0",
        "env.kind=pettingzoo env.scenario=pettingzoo.sisl.pursuit_v5": "pursuit_v5-mappo-seed0",
    }
    for overrides, name in names.items():
        assert load_config(overrides=overrides.split()).run_name() == name


def test_an_env_class_as_factory_gets_the_system_arguments_it_names():
    """torchrl's env metaclass makes inspect.signature(cls) read (*args, **kwargs); the class's
    __init__ says what it takes."""
    from marl_ppo.envs.custom import factory_arguments
    from marl_ppo.envs.toy import HybridTargetEnv

    args = factory_arguments(HybridTargetEnv, {"n_symbols": 4}, num_envs=4, device="cpu", seed=3, max_steps=7)
    assert args == {"n_symbols": 4, "num_envs": 4, "device": "cpu", "seed": 3, "max_steps": 7}
    with pytest.raises(Exception, match=r"env.kwargs \['colour'\] are not parameters of the factory HybridTargetEnv"):
        factory_arguments(HybridTargetEnv, {"colour": 1}, num_envs=4, device="cpu", seed=3, max_steps=7)


def test_a_custom_env_and_a_callback_run_with_seeds(tmp_path):
    """A factory taking num_envs holds every seed's copies; a callback's hooks run once per seed; a factory that
    ignores num_envs is refused in one line before any run directory exists."""
    calls = []

    class Count:
        def on_update_end(self, trainer, metrics):
            calls.append(trainer.parts.env.batch_size[0])

    cfg = load_config(overrides=TINY + CUSTOM + ["train.seeds=[0,1]", f"log.root={tmp_path}"])
    summaries = Trainer(cfg, callbacks=[Count()]).fit()
    assert len(summaries) == 2 and all(s["frames"] == cfg.train.total_frames for s in summaries)
    iterations = cfg.train.total_frames // cfg.train.frames_per_batch
    assert calls == [2 * cfg.env.num_envs] * (2 * iterations)  # once per seed per iteration, one env of 2 x E copies
    fixed = ["env.kind=custom", "env.factory=custom_envs:make_depot_fixed"]
    cfg = load_config(overrides=TINY + fixed + ["train.seeds=[0,1]", f"log.root={tmp_path / 'fixed'}"])
    with pytest.raises(ConfigError, match=r"train.seeds=\[0, 1\]: the env has batch size \[3\]"):
        Trainer(cfg)
    assert not (tmp_path / "fixed").exists()
