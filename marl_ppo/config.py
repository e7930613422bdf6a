"""Typed configuration: dataclasses are the source of truth, YAML files in ``configs/`` mirror them.

OmegaConf merges a YAML file and ``key=value`` overrides onto the dataclasses, checks the types and
rejects unknown keys; we add the "did you mean" suggestion.

>>> cfg = load_config(overrides=["train.total_frames=12000", "env.kwargs.n_agents=2"])
>>> cfg.train.total_frames, cfg.env.scenario, cfg.env.kwargs["n_agents"]
(12000, 'navigation', 2)
>>> load_config(overrides=["train.lr_rate=1e-3"])
Traceback (most recent call last):
...
marl_ppo.options.ConfigError: unknown config key 'train.lr_rate'; did you mean 'train.lr'?
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Optional

from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from marl_ppo.algorithms import ALGORITHMS, algorithm
from marl_ppo.collect.options import CollectorConfig
from marl_ppo.config_files import config_path, read_config_file
from marl_ppo.envs.kinds import video_refusal
from marl_ppo.envs.options import EnvConfig
from marl_ppo.log_options import LogConfig, MlflowConfig, WandbConfig
from marl_ppo.loss_options import LossConfig
from marl_ppo.models.options import ModelConfig
from marl_ppo.opponents.options import PoolConfig, parse_source, sequential_refusal
from marl_ppo.options import ConfigError, at_least, check_installed, choice, device_option, positive
from marl_ppo.recipes import recipe

__all__ = [
    "ConfigError",
    "EnvConfig",
    "ModelConfig",
    "LossConfig",
    "CollectorConfig",
    "TrainConfig",
    "WandbConfig",
    "MlflowConfig",
    "LogConfig",
    "PoolConfig",
    "Config",
    "load_config",
]


@dataclass
class TrainConfig:
    """Collection and optimisation.

    Attributes:
        total_frames: env steps (summed over envs and ranks) to train for, rounded up to whole batches
            (``summary.json`` records the frames done; ``run.log`` and the command line say when they differ).
        frames_per_batch: env steps collected per iteration (by each rank: the run's batch is ``ranks`` times it).
        num_epochs: passes over each batch.
        minibatch_size: samples (env steps) per gradient step.
        lr: Adam learning rate.
        lr_schedule: ``constant`` or ``linear`` (decay to 0 over ``total_frames``).
        max_grad_norm: global gradient-norm clip.
        seed: seeds torch, numpy, python and the envs; 0 to 2**31 - 1.
        seeds: several seeds trained in one process on one env batch, parameters stacked, one run
            directory per seed (``docs/seeds.md``); empty: the one run of ``seed``.
        device: where the networks and the update run.
        num_threads: torch intra-op threads. 0 (auto): the cores of the process's CPU affinity that
            are idle when the run starts, at least 1 and at most torch's default (one per core); a
            resume takes the run's own count. A busy machine's threads would spin-wait on each other
            (``docs/performance.md``, "Threads on a busy machine").
        compile: compile the losses' forward and backward with ``torch.compile`` (needs a C++
            compiler on CPU). The first minibatch then takes seconds to a minute to compile;
            every later one runs faster. Pays off on long runs, not on a one-minute one.
        collector: the collection backend and its workers (:class:`CollectorConfig`).
        ranks: processes of one run, each with its own ``env.num_envs`` copies, gradients averaged over them
            (started through ``torch.distributed.run``, as ``torchrun`` starts them; ``docs/scaling_out.md``).
    """

    total_frames: int = 120_000
    frames_per_batch: int = 6_000
    num_epochs: int = 10
    minibatch_size: int = 400
    lr: float = 3e-4
    lr_schedule: str = "constant"
    max_grad_norm: float = 1.0
    seed: int = 0
    seeds: list[int] = field(default_factory=list)
    device: str = "cpu"
    num_threads: int = 0
    compile: bool = False
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    ranks: int = 1

    def __post_init__(self) -> None:
        if self.num_threads < 0:
            raise ConfigError(f"train.num_threads must be >= 0 (0: torch's default), got {self.num_threads}")
        choice("train.lr_schedule", self.lr_schedule, ("constant", "linear"))
        for name in ("total_frames", "frames_per_batch", "num_epochs", "minibatch_size", "ranks"):
            at_least(f"train.{name}", getattr(self, name), 1)
        if self.minibatch_size > self.frames_per_batch:
            raise ConfigError(
                f"train.minibatch_size={self.minibatch_size} is larger than train.frames_per_batch="
                f"{self.frames_per_batch}; it must be <= frames_per_batch"
            )
        positive("train.lr", self.lr)
        positive("train.max_grad_norm", self.max_grad_norm)
        named = [("train.seed", self.seed)] + [(f"train.seeds[{i}]", s) for i, s in enumerate(self.seeds)]
        for key, seed in named:  # numpy takes < 2**32; the evaluation's seed is train.seed + 10000
            if not 0 <= seed < 2**31:
                raise ConfigError(f"{key} must be in [0, 2**31 - 1] (0 to {2**31 - 1}), got {seed}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"train.seeds must be different seeds, got {self.seeds}")
        if self.seeds and self.seed != 0:  # each of train.seeds is a run's train.seed: this one would be unused
            raise ConfigError(
                f"train.seed={self.seed} is not used when train.seeds={self.seeds} is given (each seed of "
                f"train.seeds is one run's train.seed): put {self.seed} into train.seeds, or drop train.seed"
            )

    @property
    def iterations(self) -> int:
        return -(-self.total_frames // (self.frames_per_batch * self.ranks))


def rounded_budget(train: TrainConfig) -> str:
    """One line on a ``train.total_frames`` that is not a whole number of batches: what the run does."""
    batch = f"train.frames_per_batch={train.frames_per_batch}" + (f" x train.ranks={train.ranks}" * (train.ranks > 1))
    return (
        f"train.total_frames={train.total_frames} is not a multiple of {batch}: the run does {train.iterations} "
        f"iterations, {train.iterations * train.frames_per_batch * train.ranks} frames"
    )


@dataclass
class Config:
    """A whole run.

    Attributes:
        env: the environment (:class:`EnvConfig`).
        model: policy and critic networks (:class:`ModelConfig`).
        loss: the PPO loss of every group (:class:`LossConfig`).
        train: collection and optimisation (:class:`TrainConfig`).
        log: run directory, loggers, evaluation, checkpoints (:class:`LogConfig`).
        reward_table: the YAML/dict form of :class:`~marl_ppo.groups.reward_table.RewardTable`
            (see ``docs/reward_table.md``); empty means each group trains on its own reward.
        opponents: groups that play from a source instead of learning, ``{group: source}``
            (``random``, ``self``, ``pool``, ``checkpoint:RUN_DIR[:GROUP]``, ``module:callable``;
            ``docs/opponents.md``).
        pool: snapshot pools of the groups whose source is ``pool`` (:class:`PoolConfig`).
        recipe: a published recipe's values over the layer below the one that names it
            (``epymarl``, ``mappo``, ``benchmarl``, ``marl_ppo``: :mod:`marl_ppo.recipes`, ``docs/recipes.md``).
    """

    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    log: LogConfig = field(default_factory=LogConfig)
    reward_table: Optional[dict[str, Any]] = None
    opponents: dict[str, str] = field(default_factory=dict)
    pool: PoolConfig = field(default_factory=PoolConfig)
    recipe: Optional[str] = None

    def __post_init__(self) -> None:
        if self.recipe is not None:
            _recipe(self.recipe)
        for group, source in self.opponents.items():
            parse_source(f"opponents.{group}", source)
        pooled = any(parse_source("", s).pool for s in self.opponents.values())
        for i, text in enumerate(self.log.eval_opponents):
            source = parse_source(f"log.eval_opponents[{i}]", text)
            if not source.plays and not (source.pool and pooled):
                raise ConfigError(
                    f"log.eval_opponents[{i}]: {text!r} is how a group trains, not an opponent to play"
                    + (" (pool plays a run's snapshots; this config has no pool seat)" if source.pool else "")
                )
        if pooled and not self.log.eval_deterministic:  # a pool seat draws its snapshots when actions are sampled
            raise ConfigError("log.eval_deterministic=false: a pool seat would play its snapshots in the evaluations")
        if self.log.video and video_refusal(self.env) is not None:
            raise ConfigError(f"log.video=true: {video_refusal(self.env)}")
        if self.reward_table is not None:
            from marl_ppo.groups.reward_table import RewardTable, RewardTableError

            try:  # its form here; its fit to the env's groups and keys when the env exists
                RewardTable.from_dict(self.reward_table)
            except RewardTableError as err:
                raise ConfigError(f"reward_table: {err}") from None
        env, train = self.env, self.train
        if train.frames_per_batch % env.num_envs:
            lower = train.frames_per_batch // env.num_envs * env.num_envs
            raise ConfigError(
                f"train.frames_per_batch={train.frames_per_batch} is not a multiple of env.num_envs={env.num_envs} "
                f"(each env steps the same number of times per batch); use e.g. {lower or env.num_envs} "
                f"or {lower + env.num_envs}"
            )
        workers = train.collector.num_collectors
        if env.num_envs % workers:
            raise ConfigError(
                f"env.num_envs ({env.num_envs}) must be divisible by "
                f"train.collector.num_collectors ({workers}): each worker steps the same number of envs"
            )
        self._check_model()
        why = self.seed_refusals() if len(self.train.seeds) > 1 else []
        if why:
            raise ConfigError(f"train.seeds={self.train.seeds}: many seeds in one process do not support {why[0]}")
        every = self.log.checkpoint_every
        if every and env.bounds_episodes and every * self.steps_per_batch < env.max_steps:
            # every periodic checkpoint restarts the envs' episodes (that is what makes resume exact)
            raise ConfigError(
                f"log.checkpoint_every={every} x {self.steps_per_batch} steps per env per batch = "
                f"{every * self.steps_per_batch} steps < env.max_steps={env.max_steps}: each checkpoint restarts "
                "the envs' episodes (so that a resumed run equals the uninterrupted one), so no episode "
                f"could reach its end; use log.checkpoint_every >= {-(-env.max_steps // self.steps_per_batch)} "
                "(or 0: a checkpoint at the end only)"
            )

    def seed_refusals(self) -> list[str]:
        """What ``train.seeds`` cannot run with, each with its hard reason: the one list, read once here.
        Everything else (custom envs taking ``num_envs``, frozen opponents, callbacks, video) runs with 1..S
        seeds alike."""
        from marl_ppo.envs.kinds import env_kind

        why = []
        if not env_kind(self.env.kind).seeds_in_one_env:
            why.append(f"env.kind={self.env.kind} (its env cannot hold every seed's copies in one batch)")
        if self.train.collector.backend != "direct":
            why.append(
                f"train.collector.backend={self.train.collector.backend} (the workers' policy copies are synced "
                "from the policy's modules; the seeds' stacked tensors live outside them)"
            )
        pools = [g for g, text in self.opponents.items() if parse_source("", text).pool]
        if pools:
            why.append(f"opponents {pools} from a pool (each seed would need its own snapshots; they are not stacked)")
        if self.loss.value_norm == "popart":
            why.append("loss.value_norm=popart (the critic's output layer is rescaled through plain tensor references)")
        if self.train.compile:
            why.append("train.compile=true (torch.compile of the vmapped, stacked loss is not supported)")
        if algorithm(self.loss.algorithm).sequential and self.loss.happo.order != "fixed":
            why.append(
                f"loss.algorithm={self.loss.algorithm} with loss.happo.order={self.loss.happo.order} (each seed would "
                "draw its own order of the units, but a pass of the update trains the same unit of every seed; set "
                "loss.happo.order=fixed (one order for all seeds) or run the seeds one at a time)"
            )
        return why

    def _check_model(self) -> None:
        model, train = self.model, self.train
        if model.critic == "global" and not algorithm(self.loss.algorithm).centralised:
            centralised = [a.name for a in ALGORITHMS if a.centralised]
            raise ConfigError(
                f"model.critic=global is a centralised critic (MAPPO's); loss.algorithm={self.loss.algorithm!r} "
                f"has a decentralised one (use loss.algorithm in {centralised} or model.critic=group)"
            )
        why = model.state_critic_refusal(
            self.env.state, self.env.kind, self.loss.algorithm, algorithm(self.loss.algorithm)
        )
        if why is not None:
            raise ConfigError(f"model.critic_inputs={model.critic_inputs}: {why}")
        why = sequential_refusal(self.opponents, self.pool) if algorithm(self.loss.algorithm).sequential else None
        if why is not None:  # frozen seats may play beside it; a seat that trains shared networks may not
            raise ConfigError(f"loss.algorithm={self.loss.algorithm} updates the groups one after another, but {why}")
        if not model.recurrent:
            return
        if self.steps_per_batch % model.seq_len:
            raise ConfigError(
                f"model.seq_len={model.seq_len} must divide the {self.steps_per_batch} steps each env takes per batch "
                f"(train.frames_per_batch / env.num_envs): the update cuts each env's steps into chunks of seq_len"
            )
        if train.minibatch_size % model.seq_len:
            raise ConfigError(
                f"train.minibatch_size={train.minibatch_size} must be a multiple of model.seq_len={model.seq_len} "
                "with a recurrent model: a minibatch is a set of whole chunks"
            )
        if train.compile:
            raise ConfigError(
                "train.compile=true does not support recurrent models (model.kind gru/lstm): torchrl's GRU/LSTM "
                "modules cut each chunk at episode starts into pieces of data-dependent length, which would "
                "recompile the loss on every minibatch; use train.compile=false"
            )

    @property
    def steps_per_batch(self) -> int:
        """Steps each env takes per collected batch."""
        return self.train.frames_per_batch // self.env.num_envs

    def check_machine(self) -> None:
        """Raises :class:`ConfigError` if a device is not on this machine or a package it asks for is missing."""
        device_option("train.device", self.train.device)
        device_option("env.device", self.env.device)
        self.log.check_installed()
        check_installed([f"train.collector.backend: {self.train.collector.backend}"])

    def run_name(self) -> str:
        return self.log.name or f"{self.env.task_name}-{self.loss.algorithm}-seed{self.train.seed}"


def _known_keys(cls: type = None, prefix: str = "") -> list[str]:
    """Every dotted key of the config, nested sections included (``log.wandb.project``)."""
    keys = []
    for f in fields(cls or Config):
        keys.append(prefix + f.name)
        default = f.default_factory() if callable(f.default_factory) else f.default
        if is_dataclass(default):
            keys.extend(_known_keys(type(default), f"{prefix}{f.name}."))
    return keys


def _unknown_key_error(full_key: str) -> ConfigError:
    close = difflib.get_close_matches(full_key, _known_keys(), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(_known_keys())}"
    return ConfigError(f"unknown config key {full_key!r}{hint}")


def _merge_layer(base, layer, *, replace_kwargs: bool):
    """Merges a YAML file or the overrides onto ``base``; scenario kwargs belong to their scenario.

    ``env.kwargs`` from a file (``replace_kwargs``) or given with a new ``env.scenario`` replace the
    base's (merging would leak e.g. ``n_agents`` into another scenario); overrides such as
    ``env.kwargs.n_agents=4`` for the same scenario add to them; a new scenario without kwargs
    starts from none.
    """
    changes_scenario = any(
        OmegaConf.select(layer, f"env.{name}") not in (None, OmegaConf.select(base, f"env.{name}"))
        for name in ("kind", "scenario", "factory")
    )
    merged = OmegaConf.merge(base, layer)
    layer_kwargs = OmegaConf.select(layer, "env.kwargs")
    if layer_kwargs is not None and (replace_kwargs or changes_scenario):
        merged.env.kwargs = layer_kwargs
    elif layer_kwargs is None and changes_scenario:
        merged.env.kwargs = {}
    return merged


def _recipe(name: str):
    try:
        return recipe(name)
    except ValueError as err:
        raise ConfigError(f"recipe={name}: {err}") from None


def _recipe_layer(base, layer, name: str | None):
    """``base`` with recipe ``name``'s values for the env kind ``layer`` (else ``base``) names; none: ``base``."""
    if name is None:
        return base
    merged = base.copy()
    for key, value in _recipe(name).values_for(OmegaConf.select(layer, "env.kind") or base.env.kind).items():
        OmegaConf.update(merged, key, value, merge=False)  # a recipe's reward table replaces the one below
    return merged


def recipe_lines(cfg: Config) -> list[str]:
    """Comment lines on ``cfg``'s recipe: its source, each value it sets (and the value a later layer set
    instead), and what of the published recipe it leaves out."""
    if cfg.recipe is None:
        return []
    row, resolved = _recipe(cfg.recipe), OmegaConf.structured(cfg)
    lines = [f"# recipe={row.name}: {row.source}"]
    for key, value in row.values_for(cfg.env.kind).items():
        if isinstance(value, str) and value.startswith("${"):  # an interpolation: the value it stands for
            value = OmegaConf.select(resolved, value[2:-1])
        got = OmegaConf.select(resolved, key)
        got = OmegaConf.to_container(got) if OmegaConf.is_config(got) else got
        lines.append(f"#   {key}: {value}" + ("" if got == value else f"  (set over the recipe: {got})"))
    return lines + ([f"#   leaves out: {row.leaves_out}"] if row.leaves_out else [])


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults, then the YAML file at ``path`` (or the shipped config of that name), then ``key=value``
    overrides, type-checked. A ``recipe`` (:mod:`marl_ppo.recipes`) goes just below the layer that names it:
    over the file when the overrides name it, under the file's own values when the file does."""
    schema = OmegaConf.structured(Config)
    try:
        merged = schema
        bad = [o for o in overrides or [] if "=" not in o]
        if bad:
            raise ConfigError(f"overrides must be key=value, got {bad}")
        given = OmegaConf.from_dotlist(list(overrides)) if overrides else OmegaConf.create()
        named = "recipe" in given
        if path is not None:
            text = read_config_file(config_path(path))
            below = merged if named else _recipe_layer(merged, OmegaConf.merge(text, given), text.get("recipe"))
            merged = _merge_layer(below, text, replace_kwargs=True)
            if text.get("reward_table") is not None:  # the file's table replaces a recipe's
                merged.reward_table = text.reward_table
        if named:
            merged = _recipe_layer(merged, given, given.recipe)
        if overrides:
            merged = _merge_layer(merged, given, replace_kwargs=False)
        cfg = OmegaConf.to_object(merged)
    except ConfigKeyError as err:
        key = getattr(err, "full_key", None) or str(err)
        raise _unknown_key_error(str(key)) from None
    except OmegaConfBaseException as err:
        msg = str(err).split("\n")[0]
        key = getattr(err, "full_key", None)
        default = OmegaConf.select(schema, key) if key else None
        if key and "is not a ListConfig" in msg and default is not None:  # a list key given one value
            example = f"[{', '.join(str(v) for v in default)}]" if len(default) else "[...]"
            raise ConfigError(f"bad config value for {key!r}: expected a list, e.g. {key}={example}") from None
        raise ConfigError(f"bad config value{f' for {key!r}' if key else ''}: {msg}") from None
    assert isinstance(cfg, Config)
    cfg.check_machine()
    return cfg


def to_container(cfg: Config) -> dict[str, Any]:
    """The resolved config as nested plain dicts (what the loggers get as hyper-parameters)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg))


def to_yaml(cfg: Config) -> str:
    """The resolved config as YAML (written to every run directory), after comment lines on its recipe."""
    return "".join(f"{line}\n" for line in recipe_lines(cfg)) + OmegaConf.to_yaml(OmegaConf.structured(cfg))


def from_yaml(text: str) -> Config:
    """Reads a config written by :func:`to_yaml` (the scenario kwargs replace the defaults')."""
    loaded = OmegaConf.create(text)
    merged = OmegaConf.merge(OmegaConf.structured(Config), loaded)
    file_kwargs = OmegaConf.select(loaded, "env.kwargs")
    if file_kwargs is not None:
        merged.env.kwargs = file_kwargs
    return OmegaConf.to_object(merged)
