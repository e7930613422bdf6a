"""The one place that turns a :class:`~marl_ppo.config.Config` into built parts, and back from a run.

:func:`build` wires what a run of 1..S seeds does not change (a :class:`Program`: the env of every
seed's copies, the group specs, the bound reward table, the template router, the policy, the
opponents), :func:`train_state` what it does (the :class:`~marl_ppo.core.state.TrainState`: every
seed's parameters, the optimizer, schedules, generators, counters); :func:`load_policy` rebuilds a finished run's parts
from its ``config.yaml`` and a checkpoint. Below this module nothing reads the config: the layers
under it take the plain arguments :func:`build` reads out of it.

>>> from marl_ppo.config import load_config
>>> parts = build(load_config(overrides=["env.num_envs=2", "env.kwargs.n_agents=2", "model.hidden=[8]"]))
>>> list(parts.groups), type(parts.router).__name__
(['agents'], 'GroupRouter')
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torchrl.envs import EnvBase

from marl_ppo.collect.collectors import BatchCollector, make_collector
from marl_ppo.config import Config, EnvConfig
from marl_ppo.core.aggregate import AggregatedStep
from marl_ppo.core.ranks import current
from marl_ppo.core.router import GroupRouter
from marl_ppo.core.seeds import SeedStack
from marl_ppo.core.state import TrainState
from marl_ppo.envs import EnvFactory, make_env
from marl_ppo.envs.custom import recorded_env
from marl_ppo.groups.reward_table import BoundRewardTable, RewardTable
from marl_ppo.groups.specs import GroupSpec, read_group_specs
from marl_ppo.models.critic import check_every_group_acts
from marl_ppo.models.recurrent import prime_env, state_spec
from marl_ppo.opponents import OpponentSource, opponent_policy
from marl_ppo.opponents.pool import PoolPlayer
from marl_ppo.options import ConfigError, device_option
from marl_ppo.run.checkpoints import CheckpointError, checkpoint_candidates, load_checkpoint
from marl_ppo.run.opponents import (
    checked_players,
    make_player,
    opponent_sources,
    pool_player,
    pool_seat,
    scripted_player,
    seat_learners,
    self_seat,
    shares_networks,
)
from marl_ppo.run.threads import auto_threads

__all__ = [
    "Parts",
    "Program",
    "initial_router",
    "build",
    "build_opponent",
    "train_state",
    "lr_schedule",
    "build_collector",
    "worker_env_fns",
    "load_policy",
    "seed_everything",
    "record_factory",
    "WORKER_SEED_STRIDE",
]

WORKER_SEED_STRIDE = 10_007  # worker i's env seed: train.seed + i * stride (worker 0: the direct run's seed)


@dataclass
class Program:
    """What a run of 1..S seeds does not change, built and wired; nothing computed yet.

    ``env`` holds every seed's copies (``S x env.num_envs``); ``groups`` are every group of the env;
    the template ``router`` trains those without an opponent source (and the ``self`` ones), with
    the first seed's initial parameters (``router_of(s)``: a router with seed ``s``'s);
    ``opponents`` act for the others; ``policy`` (the template's) runs them all (one seed's
    collection, and every seed's evaluation).
    """

    env: EnvBase
    groups: dict[str, GroupSpec]
    reward_table: BoundRewardTable
    router: GroupRouter
    opponents: dict[str, Any] = field(default_factory=dict)
    pools: dict[str, PoolPlayer] = field(default_factory=dict)
    policy: Any = None
    seeds: list[int] = field(default_factory=lambda: [0])
    router_of: Callable[[int], GroupRouter] | None = None  # seed -> a router with that seed's initial parameters
    step_of: Callable[..., AggregatedStep] = AggregatedStep  # the config's optimizer step over given parameters

    @functools.cached_property
    def step(self) -> AggregatedStep:
        """An optimizer step over the template router's own parameters, made when first asked for (to drive
        ``ppo_update`` by hand with one router, as benchmarks and notebooks do); a run trains with its
        :class:`~marl_ppo.core.state.TrainState`'s step."""
        return self.step_of(self.router)

    def __post_init__(self) -> None:
        if self.policy is None:
            actors = [self.pools.get(g) or self.router.losses[g].actor_network for g in self.router.groups]
            # the router's policy with each pool seat's actor in its player (recurrent critics as they are)
            collect = (
                TensorDictSequential(*actors, *self.router.recurrent_critics) if self.pools else self.router.policy
            )
            self.policy = opponent_policy(collect, self.opponents)

    def after_update(self, iteration: int, batch: TensorDictBase | None = None) -> dict[str, float]:
        """What follows an update: the pools' ratings from ``batch``'s games and their snapshots every
        ``pool.every`` iterations; returns the ratings' metrics."""
        return {k: v for pool in self.pools.values() for k, v in pool.after_update(iteration, batch).items()}


Parts = Program  # the name the program had before its training state was split off


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build(
    cfg: Config,
    seeds: Sequence[int] | None = None,
    *,
    env_fn: EnvFactory | None = None,
    players: Mapping[str, Callable] | None = None,
) -> Parts:
    """Env, group specs, validated reward table and template router from a config, once for
    S seeds (``seeds``, default ``[train.seed]``): one env of ``S x env.num_envs`` copies seeded with the
    first seed (on rank r of a ranks run, :meth:`~marl_ppo.core.ranks.Ranks.seed` of it), the router (seed
    ``seeds[0]``'s initial parameters; :func:`train_state` makes the others' from their own seeds).

    ``env_fn`` builds the env instead of ``cfg.env`` (see :func:`~marl_ppo.envs.make_env`); ``players``
    (``{group: act}``) play those groups as scripted opponents instead of what ``opponents`` names.
    """
    seeds = list(seeds or [cfg.train.seed])
    torch.set_num_threads(cfg.train.num_threads or auto_threads())  # 0: auto (marl_ppo/run/threads.py)
    own = current().seed(seeds[0])  # rank r of a ranks run: its own env copies and streams (rank 0: the seed)
    seed_everything(own)
    env = make_env(cfg.env, seed=own, env_fn=env_fn, num_envs=len(seeds) * cfg.env.num_envs)
    copies = len(seeds) * cfg.env.num_envs
    if len(seeds) > 1 and tuple(env.batch_size[:1]) != (copies,):  # a custom factory that ignores num_envs
        env.close()
        raise ConfigError(
            f"train.seeds={seeds}: the env has batch size {list(env.batch_size)}, not the {copies} copies of "
            f"{len(seeds)} seeds x env.num_envs={cfg.env.num_envs} (a factory for many seeds takes num_envs)"
        )
    groups = read_group_specs(env)
    sources = opponent_sources(cfg.opponents, groups)
    frozen = [g for g, source in sources.items() if not source.learns]
    pooled = [g for g, source in sources.items() if source.pool]
    # a pool seat's loss counts its steps against the latest policy only: its own training mask
    trained = {g: pool_seat(spec, cfg) if g in pooled else spec for g, spec in groups.items() if g not in frozen}
    table = (
        RewardTable.from_dict(cfg.reward_table)
        if cfg.reward_table is not None
        else RewardTable.own_rewards(list(trained))
    )
    bound = table.bind(groups, env, untrained=frozen)  # validated before any training
    if cfg.model.critic == "global" and any(s.keys.mask is not None for s in trained.values()):
        check_every_group_acts(env.reset(), trained)
    shared = {g: self_seat(g, s, trained, sources) for g, s in sources.items() if shares_networks(g, s)}
    router = initial_router(cfg, trained, shared, seeds[0])
    unknown = set(cfg.loss.group_weights) - set(trained)
    if unknown:
        raise KeyError(f"loss.group_weights names unknown group(s) {sorted(unknown)}; groups are {list(trained)}")
    players = checked_players(players or {}, frozen)
    opponents = {
        g: scripted_player(cfg, f"opponents.{g}", players[g], groups[g], env_fn)
        if g in players
        else build_opponent(cfg, f"opponents.{g}", sources[g], groups[g], env_fn=env_fn)
        for g in frozen
    }
    pools = {
        g: pool_player(
            cfg, trained[g], router, groups[g].keys.mask, functools.partial(build_opponent, cfg, env_fn=env_fn)
        )
        for g in pooled
    }
    # pool.seating=learner: one seat on the latest policy per episode, the seats in the policy's order
    seat_learners(cfg, {g: pools[g] for g in router.groups if g in pools}, shared)
    router_of = functools.partial(initial_router, cfg, trained, shared)
    step_of = functools.partial(
        AggregatedStep, lr=cfg.train.lr, max_grad_norm=cfg.train.max_grad_norm, weights=cfg.loss.group_weights
    )
    parts = Parts(env, groups, bound, router, opponents, pools, seeds=seeds, router_of=router_of, step_of=step_of)
    # recurrent models: is_init and their stored states; a pool's draws: is_init
    prime_env(env, state_spec(parts.policy))
    return parts


# the loss section's fields the router takes as they are
_ROUTER_LOSS_OPTIONS = (
    "algorithm", "value_norm", "popart_beta", "clip_epsilon", "entropy_coeff", "head_entropy_coeff", "critic_coeff",
    "loss_critic_type", "normalize_advantage", "gamma", "lmbda", "estimator", "nstep", "bundle_groups",
)  # fmt: skip


def initial_router(cfg: Config, trained: Mapping[str, GroupSpec], shared: Mapping[str, str], seed: int) -> GroupRouter:
    """The router of ``cfg`` for the ``trained`` groups, its initial parameters drawn right after
    ``torch.manual_seed(seed)``: seed ``s`` starts from the same parameters alone or in a group."""
    torch.manual_seed(seed)
    router = GroupRouter.from_specs(
        trained,
        shared=shared,
        model=cfg.model,
        device=cfg.train.device,
        **{k: getattr(cfg.loss, k) for k in _ROUTER_LOSS_OPTIONS},
    )
    if cfg.train.compile:
        # in place (nn.Module.compile): the state_dict keeps its keys; the policy used for
        # collection is not compiled, only the update's loss computation
        router.compile(dynamic=False)
    return router


def build_opponent(cfg: Config, key: str, source: OpponentSource, spec: GroupSpec, *, env_fn: EnvFactory | None = None):
    """The player of ``source`` for the group of ``spec`` (``key`` names it in errors), on ``train.device``
    (:func:`~marl_ppo.run.opponents.make_player`, another run's policy loaded by :func:`load_policy`)."""
    return make_player(cfg, key, source, spec, env_fn=env_fn, load_run=load_policy)


def train_state(cfg: Config, parts: Parts) -> TrainState:
    """The run's :class:`~marl_ppo.core.state.TrainState` for the seeds of ``parts``: their routers as one
    :class:`~marl_ppo.core.seeds.SeedStack` (the template, and each other seed's initial parameters drawn
    from its own seed, the global random stream left as it was), one optimizer step over the stack, the
    learning-rate schedule (``train.lr_schedule``: constant, or linear to 0 over
    ``train.iterations``), each seed's update ``torch.Generator`` on ``train.device`` seeded with its seed,
    and counters at 0."""
    others = []
    for seed in parts.seeds[1:]:
        with torch.random.fork_rng():
            others.append(parts.router_of(seed))
    stack = SeedStack([parts.router, *others])
    step = parts.step_of(stack.trainable, seeds=stack.seeds, stacked=stack.stacked)
    # the update's own random streams (minibatch order), seeded from each seed: the core draws nothing
    # from the global RNG, and a checkpoint carries each seed's stream's state
    generators = [torch.Generator(device=cfg.train.device).manual_seed(s) for s in parts.seeds]
    snapshots = {g: pool.snapshots for g, pool in parts.pools.items()}
    return TrainState(
        stack, step, lr_schedule(cfg, step.optimizer), generators, snapshots=snapshots,
        entropy_schedule=entropy_schedule(cfg),
    )  # fmt: skip


def entropy_schedule(cfg: Config) -> Callable[[int], float] | None:
    """``loss.entropy_schedule``: ``None`` (constant: the coefficients as configured), or iteration -> the scale
    of every entropy coefficient, linear from 1 to ``loss.entropy_final_scale`` over ``train.iterations``."""
    if cfg.loss.entropy_schedule != "linear":
        return None
    final, iterations = cfg.loss.entropy_final_scale, cfg.train.iterations
    return lambda it: 1.0 - (1.0 - final) * min(it / iterations, 1.0)


def lr_schedule(cfg: Config, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    """``train.lr_schedule`` over ``optimizer``: constant, or linear to 0 over ``train.iterations``."""
    iterations = cfg.train.iterations
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        (lambda it: max(1.0 - it / iterations, 0.0)) if cfg.train.lr_schedule == "linear" else (lambda it: 1.0),
    )


def _make_worker_env(env_cfg: EnvConfig, seed: int, num_envs: int, state: Any = None) -> EnvBase:
    return prime_env(make_env(env_cfg, seed=seed, num_envs=num_envs), state)


def worker_env_fns(cfg: Config, state: Any = None) -> list[Callable[[], EnvBase]]:
    """One picklable env factory per collector worker, each with its share of ``env.num_envs``.

    ``state``: the policy's recurrent state entries (:func:`~marl_ppo.models.recurrent.state_spec`).
    """
    n = cfg.train.collector.num_collectors  # Config checked that it divides env.num_envs
    return [
        functools.partial(
            _make_worker_env, cfg.env, cfg.train.seed + i * WORKER_SEED_STRIDE, cfg.env.num_envs // n, state
        )
        for i in range(n)
    ]


def build_collector(
    cfg: Config,
    env: EnvBase,
    policy: Any,
    *,
    total_frames: int,
    lean: bool = True,
    seeds: int = 1,
    reuse_batch: bool = False,
) -> BatchCollector:
    """The collector of ``train.collector`` (:func:`~marl_ppo.collect.collectors.make_collector`): ``env`` for
    ``direct``, a seeded share of ``env.num_envs`` per worker otherwise. ``seeds``: S seeds' env copies in
    ``env``, each seed collecting ``train.frames_per_batch`` a batch (``total_frames`` is per seed).
    ``reuse_batch``: each batch valid until the next is drawn (``make_collector``'s)."""
    backend = cfg.train.collector.backend
    env_fns = worker_env_fns(cfg, state_spec(policy)) if backend != "direct" else ()
    return make_collector(
        env,
        policy,
        frames_per_batch=seeds * cfg.train.frames_per_batch,
        total_frames=seeds * total_frames,
        device=cfg.train.device,
        backend=backend,
        env_fns=env_fns,
        lean=lean,
        reuse_batch=reuse_batch,
    )


def load_policy(
    run_dir: str | Path,
    checkpoint: str = "last.pt",
    *,
    device: str | None = None,
    env_fn: EnvFactory | None = None,
    players: Mapping[str, Callable] | None = None,
):
    """Rebuilds a run's parts from its ``config.yaml`` and loads a checkpoint's parameters.

    ``device`` moves the env and the networks (e.g. ``"cpu"`` for a run trained on ``cuda``);
    ``env_fn`` builds the env of a run whose factory its config could not name (a notebook's), and
    ``players`` its notebook's scripted opponents (``{group: act}``).
    """
    from marl_ppo.config import from_yaml

    run_dir = Path(run_dir)
    cfg = from_yaml((run_dir / "config.yaml").read_text())
    if device is not None:
        cfg = replace(cfg, env=replace(cfg.env, device=device), train=replace(cfg.train, device=device))
    device_option("train.device", cfg.train.device)  # its loggers and collector need not be installed here
    device_option("env.device", cfg.env.device)
    try:
        state = load_checkpoint(run_dir / "checkpoints" / checkpoint)  # weights_only: runs no code
    except CheckpointError as err:  # name the checkpoint that would do, as --resume would fall back to it
        usable = _usable_checkpoint(run_dir / "checkpoints", skip=checkpoint)
        hint = (
            f"; the newest usable checkpoint is {usable}: use it with --checkpoint {usable}"
            if usable
            else "; no other checkpoint of the run loads"
        )
        raise CheckpointError(f"{err}{hint}") from None
    parts = build(cfg, env_fn=env_fn, players=players)
    parts.router.load_state_dict(state["router"])
    for g, pool in parts.pools.items():  # the snapshots as they stood (eval --opponent pool plays them)
        if g in state.get("pools", {}):
            pool.snapshots.load(state["pools"][g])
    return cfg, parts


def record_factory(cfg: Config, env_fn: EnvFactory | None, players: Mapping[str, Callable] | None = None) -> Config:
    """The config a run records: its env section as :func:`~marl_ppo.envs.custom.recorded_env` gives it
    (``env_fn`` named as ``env.factory`` where it can be), ``players`` as ``opponents`` (each named by
    its import path where it can be), its opponents' paths absolute
    (:func:`~marl_ppo.run.pinned.absolute_sources`)."""
    from marl_ppo.run.pinned import absolute_sources, recorded_players

    env = recorded_env(cfg.env, env_fn)
    cfg = cfg if env is cfg.env else replace(cfg, env=env)
    return absolute_sources(recorded_players(cfg, players) if players else cfg)


def _usable_checkpoint(ckpt_dir: Path, skip: str) -> str | None:
    """The name of the newest checkpoint in ``ckpt_dir`` other than ``skip`` that loads, or ``None``."""
    for path in checkpoint_candidates(ckpt_dir):
        if path.name == skip:
            continue
        try:
            load_checkpoint(path)
        except CheckpointError:
            continue
        return path.name
    return None
