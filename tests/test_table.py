"""The package's variant tables are rows of one :class:`~marl_ppo.table.Table`: each lookup says "did you
mean", each refuses a name taken by another row, and a row registered from outside is read through the
config, as a shipped one is (algorithms with their options, model kinds, logger kinds).
"""

from __future__ import annotations

import dataclasses

import pytest

from marl_ppo.algorithms import ALGORITHMS, Algorithm, HappoOptions, algorithm, register_algorithm
from marl_ppo.config import load_config, to_yaml
from marl_ppo.core.update import ppo_update
from marl_ppo.core.update_modes import UPDATE_MODES, update_fn
from marl_ppo.log_options import LOGGER_KINDS, LoggerKind
from marl_ppo.models.registry import MODEL_KINDS, ModelKind, model_kind, register_model_kind
from marl_ppo.options import ConfigError
from marl_ppo.run.logger import BACKENDS, Backend, RunLogger, read_scalars


@pytest.mark.parametrize(
    "lookup, name, words",
    [
        (algorithm, "ipo", ["unknown algorithm 'ipo'", "did you mean 'ippo'", "'clip_ppo'"]),
        (model_kind, "lstn", ["unknown model kind 'lstn'", "did you mean 'lstm'", "'deepsets'"]),
        (LOGGER_KINDS.lookup, "tensorbord", ["unknown logger kind 'tensorbord'", "did you mean 'tensorboard'"]),
        (UPDATE_MODES.lookup, "sequental", ["unknown update mode 'sequental'", "did you mean 'sequential'"]),
        (BACKENDS.lookup, "mlfow", ["unknown logger backend 'mlfow'", "did you mean 'mlflow'"]),
    ],
)
def test_an_unknown_name_is_answered_with_the_closest_and_every_registered_one(lookup, name, words):
    with pytest.raises(ValueError) as err:
        lookup(name)
    assert all(w in str(err.value) for w in words), err.value


def test_a_name_taken_by_another_row_is_refused_and_the_same_row_twice_is_not(isolated):
    isolated(ALGORITHMS, MODEL_KINDS)
    with pytest.raises(ValueError, match="algorithm 'mappo' is registered already"):
        register_algorithm(Algorithm("mappo", "torchrl.objectives.multiagent:IPPOLoss", "decentralised"))
    with pytest.raises(ValueError, match="model kind 'gru' is registered already"):
        register_model_kind(ModelKind("gru", None))
    assert register_algorithm(algorithm("ippo")) is algorithm("ippo")
    assert algorithm("mappo").loss == "torchrl.objectives.multiagent:MAPPOLoss"


def test_happos_options_live_on_its_row_and_reach_its_update_mode():
    assert algorithm("happo").options is HappoOptions
    cfg = load_config(overrides=["loss.algorithm=happo", "loss.happo.order=fixed"])
    assert isinstance(cfg.loss.happo, HappoOptions)
    bound = update_fn(algorithm("happo"), cfg.loss)
    assert bound.func is UPDATE_MODES.lookup("sequential").fn
    assert bound.keywords == {"order": "fixed", "critic": "after"}
    assert update_fn(algorithm("mappo"), cfg.loss) is ppo_update  # no options: the mode as it is
    # the YAML of a run keeps HAPPO's section as it was
    assert "  happo:\n    order: fixed\n    critic: after\n" in to_yaml(cfg)
    with pytest.raises(ConfigError, match=r"loss.happo.critic must be one of \['after', 'with_actor'\], got 'never'"):
        load_config(overrides=["loss.happo.critic=never"])


def test_a_registered_algorithm_with_options_and_no_section_of_its_own_runs_with_their_defaults(isolated):
    isolated(ALGORITHMS)
    register_algorithm(dataclasses.replace(algorithm("happo"), name="happo_too"))  # HAPPO under another name
    cfg = load_config(overrides=["loss.algorithm=happo_too", "loss.happo.order=fixed"])  # loss.happo is HAPPO's
    assert update_fn(algorithm(cfg.loss.algorithm), cfg.loss).keywords == {"order": "random", "critic": "after"}


def test_a_registered_model_kind_is_a_choice_of_the_config(isolated):
    isolated(MODEL_KINDS)
    with pytest.raises(ConfigError, match="model.kind must be one of"):
        load_config(overrides=["model.kind=wide"])
    register_model_kind(ModelKind("wide", "marl_ppo.models.gnn:gnn_trunk", options={"width": 8}))
    cfg = load_config(overrides=["model.kind=wide", "model.options.wide.width=4"])
    assert cfg.model.kind == "wide" and cfg.model.kind_options("wide") == {"width": 4}


def _open_jsonl(cls, run_dir, options, exp_name, resume_step):
    return cls(exp_name="jsonl", log_dir=str(run_dir))


def test_a_registered_logger_kind_is_read_by_the_config_and_opened_by_the_run(isolated, tmp_path):
    """A kind of this file: torchrl's CSV logger writing under ``jsonl/``, opened beside the run's CSV."""
    isolated(LOGGER_KINDS, BACKENDS)
    with pytest.raises(ConfigError, match=r"log.loggers\[\] must be one of"):
        load_config(overrides=["log.loggers=[csv,jsonl]"])
    LOGGER_KINDS.register(LoggerKind("jsonl", "torchrl.record.loggers.csv:CSVLogger"))
    BACKENDS.register(Backend("jsonl", _open_jsonl, lambda logger: logger.experiment.files.clear()))
    cfg = load_config(overrides=["log.loggers=[csv,jsonl]"])
    logger = RunLogger(tmp_path, cfg.log, "run")
    logger.log({"train/lr": 0.5}, step=10)
    logger.close()
    assert read_scalars(tmp_path) == {"train/lr": [(10, 0.5)]}
    assert (tmp_path / "jsonl" / "scalars" / "train" / "lr.csv").read_text() == "10,0.5\n"


def test_a_logger_whose_package_is_missing_names_the_extra_from_its_row(isolated):
    isolated(LOGGER_KINDS)
    LOGGER_KINDS.register(LoggerKind("absent", "torchrl.record.loggers.csv:CSVLogger", "no_such_package_here", "x"))
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["log.loggers=[absent]"])
    assert str(err.value) == (
        "log.loggers: absent needs the 'no_such_package_here' package, which is not installed here: "
        "pip install 'marl-ppo[x]'"
    )
