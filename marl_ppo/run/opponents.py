"""Opponents wired from a config: which groups play from a source, which share networks, their players.

:func:`~marl_ppo.run.build.build` reads ``opponents`` and ``pool`` through these: the sources parsed
against the env's groups (:func:`opponent_sources`), the training group a ``self``/``pool:GROUP`` seat
plays with (:func:`self_seat`), a pool seat's spec and player (:func:`pool_seat`, :func:`pool_player`),
and every other source's player (:func:`make_player`: its line's ``player``, random, scripted with the
env's raw observation, another run's frozen policy). See ``docs/opponents.md``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from marl_ppo.config import Config
from marl_ppo.core.router import GroupRouter
from marl_ppo.envs import EnvFactory, load_factory
from marl_ppo.envs.custom import factory_path
from marl_ppo.envs.kinds import env_kind
from marl_ppo.groups.specs import GroupSpec, seat_difference
from marl_ppo.models.actor import build_actor, seat_actor
from marl_ppo.models.modules import plain_networks
from marl_ppo.opponents import OpponentSource, PlayerContext, RawObservation, ScriptedPlayer, parse_source
from marl_ppo.opponents.pool import TRAIN_MASK, LearnerSeating, PoolPlayer, SnapshotNet, SnapshotPart
from marl_ppo.options import ConfigError
from marl_ppo.run.checkpoints import CheckpointError, preserved_rng
from marl_ppo.table import resolve

__all__ = [
    "opponent_sources",
    "shares_networks",
    "self_seat",
    "pool_seat",
    "pool_player",
    "snapshot_policy",
    "seat_learners",
    "make_player",
    "checked_players",
    "scripted_player",
]


def pool_seat(spec: GroupSpec, cfg: Config) -> GroupSpec:
    """A pool seat's spec for the router: its loss mask is its ``train_mask`` (:mod:`marl_ppo.opponents.pool`)."""
    if spec.is_composite_action:
        raise ConfigError(f"opponents.{spec.name}: a pool seat with a composite action is not supported yet")
    if cfg.train.collector.backend != "direct":  # a worker's copy of the policy would keep its first snapshots
        raise ConfigError(
            f"opponents.{spec.name}: a pool's snapshots live in this process; train.collector.backend="
            f"{cfg.train.collector.backend} collects in workers that would never see a new one "
            "(use train.collector.backend=direct)"
        )
    return dataclasses.replace(spec, keys=dataclasses.replace(spec.keys, mask=(spec.name, TRAIN_MASK)))


def pool_player(cfg: Config, spec: GroupSpec, router: GroupRouter, env_mask, make_fixed: Callable) -> PoolPlayer:
    """The pool seat's player: its live actor (the shared networks), a snapshot (the first one taken) or
    one of ``pool.fixed``, built by ``make_fixed(key, source, spec)`` (:func:`make_player`, bound)."""
    live = router.losses[spec.name].actor_network
    net = router.networks.of(live)
    if net is not None:  # an agent MLP: its snapshots in the actor built around it
        snapshots = SnapshotNet(net)
        frozen = build_actor(spec, net=snapshots)
    else:  # a trunk (cnn, deepsets, gnn, a chain) or a recurrent policy: the whole policy's snapshots
        snapshots = SnapshotNet(live)
        frozen = snapshot_policy(live, snapshots)
    pool = cfg.pool
    seat = dataclasses.replace(spec, keys=dataclasses.replace(spec.keys, mask=env_mask))  # the env's own keys
    fixed = [
        make_fixed(f"pool.fixed[{i}]", parse_source(f"pool.fixed[{i}]", s), seat) for i, s in enumerate(pool.fixed)
    ]
    player = PoolPlayer(
        spec,
        live,
        frozen,
        snapshots,
        source=cfg.opponents[spec.name],
        latest_share=pool.latest_share,
        size=pool.size,
        every=pool.every,
        env_mask=env_mask,
        fixed=fixed,
        fixed_share=pool.fixed_share,
        draw=pool.draw,
        drop=pool.drop,
    )
    player.snapshot(0)
    return player


def snapshot_policy(live: nn.Module, snapshots: SnapshotNet) -> nn.Module:
    """``live`` (a policy with a trunk, the template of ``snapshots``) playing the snapshots: a copy of it
    whose every plain network runs the snapshots' parameters for that network."""
    frozen = copy.deepcopy(live).requires_grad_(False)
    for path, net in plain_networks(live).items():
        frozen.set_submodule(path, SnapshotPart(snapshots, path, net))
    return frozen


def seat_learners(cfg: Config, pools: dict[str, PoolPlayer], networks: dict[str, str]) -> None:
    """``pool.seating=learner``: one :class:`LearnerSeating` for each set of pool seats on one group's
    networks (``networks``: seat -> the group whose networks it plays with), in ``pools``' order (the
    policy's); a ConfigError where no two pool seats share networks."""
    if cfg.pool.seating != "learner":
        return
    owners: dict[str, list[str]] = {}
    for seat in pools:
        owners.setdefault(networks.get(seat, seat), []).append(seat)
    shared = [seats for seats in owners.values() if len(seats) > 1]
    if not shared:
        raise ConfigError(
            f"pool.seating=learner draws which of several pool seats on one group's networks plays the latest "
            f"policy, but the pool seats {list(pools)} share none (e.g. player_1: pool, player_2: pool:player_1); "
            "with one pool seat, set pool.seating=independent"
        )
    for seats in shared:
        seating = LearnerSeating(seats)
        for seat in seats:
            pools[seat].seating = seating


def opponent_sources(given: dict[str, str], groups: dict[str, GroupSpec]) -> dict[str, OpponentSource]:
    """``opponents`` parsed, each naming a group of the env, at least one group left to train."""
    unknown = sorted(set(given) - set(groups))
    if unknown:
        raise ConfigError(
            f"opponents names group(s) {unknown} that the env does not have; its groups are {list(groups)}"
        )
    sources = {g: parse_source(f"opponents.{g}", text) for g, text in given.items()}
    if all(g in sources and not sources[g].learns for g in groups):
        raise ConfigError(f"opponents gives every group {list(groups)} a source: no group is left to train")
    return sources


def shares_networks(group: str, source: OpponentSource) -> bool:
    """Whether ``group`` plays with another group's networks: ``self``, ``pool:OTHER`` (``pool``: its own)."""
    return source.shares_networks(group)


def self_seat(group: str, source: OpponentSource, trained: dict[str, GroupSpec], sources) -> str:
    """The training group whose networks ``group`` plays with (``self``: the first with identical specs)."""
    own = [g for g in trained if not (g in sources and shares_networks(g, sources[g]))]  # train their own networks
    if source.group is not None:
        if source.group not in own:
            raise ConfigError(
                f"opponents.{group}: {source.kind}:{source.group} names no group that trains its own networks; "
                f"those are {own}"
            )
        why = seat_difference(trained[group], trained[source.group])
        if why is not None:
            raise ConfigError(f"opponents.{group}: {source.kind}:{source.group} cannot play this seat: {why}")
        return source.group
    for g in own:
        if seat_difference(trained[group], trained[g]) is None:
            return g
    why = "; ".join(seat_difference(trained[group], trained[g]) for g in own)
    raise ConfigError(
        f"opponents.{group}: '{source.kind}' needs a training group with identical specs, and none has them ({why})"
    )


def checked_players(players: Mapping[str, Callable], frozen: Sequence[str]) -> dict[str, Callable]:
    """``players`` (``{group: act}``), each for a group that plays from a source; a ConfigError otherwise."""
    wrong = sorted(set(players) - set(frozen))
    if wrong:
        raise ConfigError(
            f"players names group(s) {wrong} that do not play as opponents in this config (opponents: "
            f"{list(frozen)}); a Trainer given players records each as opponents.GROUP"
        )
    return dict(players)


def scripted_player(cfg: Config, key: str, act: Callable, spec: GroupSpec, env_fn: EnvFactory | None):
    """A Python callable ``act(observation, action_mask)`` playing the group of ``spec`` (a notebook's bot)."""
    name = factory_path(act) or getattr(act, "__qualname__", repr(act))
    return ScriptedPlayer(spec, act, name, _raw_observation(cfg, spec, env_fn), cfg.env.scenario)


def make_player(
    cfg: Config,
    key: str,
    source: OpponentSource,
    spec: GroupSpec,
    *,
    load_run: Callable[..., tuple[Config, Any]],
    env_fn: EnvFactory | None = None,
):
    """The player of ``source`` for the group of ``spec`` (``key`` names it in errors), on ``train.device``:
    its line's ``player``, made from what this run lends it (:class:`~marl_ppo.opponents.players.PlayerContext`);
    ``load_run(run_dir, device=...)`` rebuilds another run (:func:`~marl_ppo.run.build.load_policy`)."""
    if not source.plays:
        raise ConfigError(f"{key}: {source.kind!r} is a way to train, not an opponent to play")
    context = PlayerContext(
        key,
        spec,
        cfg.env.scenario,
        load_callable=lambda target: load_factory(target, what=key),
        raw_observation=lambda: _raw_observation(cfg, spec, env_fn),
        load_policy=lambda source: _checkpoint_player(cfg, key, source, spec, load_run),
    )
    return resolve(source.row.player)(source, context)


def _raw_observation(cfg: Config, spec: GroupSpec, env_fn: EnvFactory | None) -> RawObservation:
    """How the env gives the group's observation, for a scripted player (before flattening, where the env
    kind says how: PettingZoo)."""
    raw = None if env_fn is not None else env_kind(cfg.env.kind).raw_observation_specs(cfg.env)
    if raw is None:  # the env gives what the networks read
        return RawObservation(tuple(spec.observation_shape[1:]))
    from torchrl.data import Categorical, OneHot

    leaf = raw[spec.name]
    if isinstance(leaf, OneHot):
        return RawObservation((), "int64", leaf.shape[-1])
    if isinstance(leaf, Categorical) and leaf.ndim == 1:
        return RawObservation((), "int64", int(leaf.space.n))
    return RawObservation(tuple(leaf.shape[1:]), torch.empty(0, dtype=leaf.dtype).numpy().dtype.name)


def _checkpoint_player(cfg: Config, key: str, source: OpponentSource, spec: GroupSpec, load_run) -> Any:
    """Another run's policy for ``source.group`` (default: this group's name), frozen, on this group's keys."""
    run_dir = Path(source.target).expanduser()
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(
            f"{key}: checkpoint:{source.target}: {run_dir.resolve()} is not a run directory (no config.yaml)"
        )
    threads = torch.get_num_threads()
    try:
        with preserved_rng():  # building the other run's parts must not move this run's random streams
            _, other = load_run(run_dir, device=cfg.train.device)
    except (CheckpointError, ConfigError, FileNotFoundError) as err:
        raise ConfigError(f"{key}: checkpoint:{source.target}: {err}") from None
    finally:
        torch.set_num_threads(threads)
    if not other.env.is_closed:  # a run loaded once for several of its groups (cross-play) is closed once
        other.env.close()
    group = source.group or spec.name
    if group not in other.router.groups:
        raise ConfigError(
            f"{key}: run {source.target} trained no group {group!r}; it trained {list(other.router.groups)}"
        )
    why = seat_difference(spec, other.router.groups[group])
    if why is not None:
        raise ConfigError(
            f"{key}: the policy of group {group!r} of run {source.target} cannot play this run's seat {spec.name!r}: "
            f"{why} (this run's seat on the left, the other run's group on the right)"
        )
    try:
        actor = other.router.losses[group].actor_network
        return seat_actor(
            spec, actor, other.router.networks, frozen=True, what=f"{key}: run {source.target}'s {group!r}"
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
