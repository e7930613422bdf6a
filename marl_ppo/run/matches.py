"""The trained policy against opponents: win, draw and loss rates per seat.

A *seat* is a group the trained policy can play: a group the router trains, or a group whose specs
equal a trained group's (the trained network then plays it on that group's keys: tic-tac-toe's
``player_2`` when only ``player_1`` trained). For each opponent source and each seat, the trained
policy plays the seat (deterministically, as every evaluation) and the source plays every other group,
for exactly ``episodes`` episodes on the run's evaluation envs (:class:`~marl_ppo.run.evaluation.Evaluator`).
Used by ``marl-ppo eval --opponent`` and, with ``log.eval_opponents``, at every evaluation of a run,
logged as ``eval/vs_<source>/<seat>/{win_rate,draw_rate,loss_rate,episode_reward}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tensordict.nn import TensorDictSequential

from marl_ppo.config import Config
from marl_ppo.groups.specs import seat_difference
from marl_ppo.models.actor import seat_actor
from marl_ppo.opponents import Outcomes, count_outcomes, parse_source, source_label
from marl_ppo.options import ConfigError
from marl_ppo.run.build import Parts, build_opponent
from marl_ppo.run.evaluation import EvalResult, Evaluator
from marl_ppo.run.payoff import snapshot_actor

__all__ = ["Matches", "seats"]


def seats(parts: Parts) -> dict[str, object]:
    """Each group the trained policy can play, with the actor that plays it."""
    router = parts.router
    out = {}
    for g, spec in parts.groups.items():
        if g in router.groups:
            out[g] = router.losses[g].actor_network
            continue
        for t in router.groups:
            if seat_difference(spec, router.groups[t]) is None:
                actor = router.losses[t].actor_network
                out[g] = seat_actor(spec, actor, router.networks, what=f"group {t!r}'s policy")
                break
    return out


class Matches:
    """Plays ``sources`` against the trained policy in ``seat`` (``None``: every seat it can take); ``callback``
    sees the first match's evaluation (a video recorder: ``marl-ppo eval RUN --opponent S --video F``)."""

    def __init__(
        self,
        cfg: Config,
        parts: Parts,
        sources: Sequence[str],
        evaluator: Evaluator,
        *,
        seat: str | None = None,
        sample: bool = False,
        callback=None,
    ) -> None:
        self.cfg, self.parts, self.evaluator, self.deterministic = cfg, parts, evaluator, not sample
        self._callback = callback  # handed to the first match's evaluation only (a video's recorder)
        self.sources = {text: parse_source(f"opponent {text!r}", text) for text in sources}
        self.seats = seats(parts) if self.sources else {}
        if len(parts.groups) < 2 and self.sources:
            raise ConfigError(f"an opponent needs a second group to play; the env has only {list(parts.groups)}")
        if seat in ("all", "both"):  # every seat it can play: the default
            seat = None
        if seat is not None:
            if seat not in self.seats:
                raise ConfigError(
                    f"--seat {seat!r}: the trained policy can play {sorted(self.seats)} (or all of them: --seat all)"
                )
            self.seats = {seat: self.seats[seat]}
        self._players: dict[tuple[str, str], object] = {}  # (source, group) -> player, built once

    def _first(self):
        callback, self._callback = self._callback, None
        return callback

    def _player(self, text: str, group: str):
        if (text, group) not in self._players:
            spec = self.parts.groups[group]
            self._players[text, group] = build_opponent(self.cfg, f"opponent {text!r}", self.sources[text], spec)
        return self._players[text, group]

    def play(self, text: str, seat: str) -> tuple[EvalResult, Outcomes | None]:
        """One source against the trained policy in ``seat``: the evaluation and the seat's outcomes."""
        if self.sources[text].pool:
            result = self._play_pool(text, seat)
        else:
            others = [self._player(text, g).to(self.cfg.train.device) for g in self.parts.groups if g != seat]
            policy = TensorDictSequential(self.seats[seat], *others)
            result = self.evaluator(policy=policy, deterministic=self.deterministic, callback=self._first())
        return result, (count_outcomes(result.per_episode, seat) if result.episodes else None)

    def _pool(self, text: str):
        """The run's pool that ``pool`` (or ``pool:GROUP``: the pool of GROUP's networks) names."""
        group = self.sources[text].group
        found = {}  # the group whose networks a pool snapshots: pool:GROUP's GROUP, or a pool seat's own
        for seat, pool in self.parts.pools.items():
            found.setdefault(parse_source(f"opponents.{seat}", pool.source).group or seat, pool)
        if group is not None and group in found:
            return found[group]
        if group is None and len(found) == 1:
            return next(iter(found.values()))
        have = ", ".join(f"pool:{g}" for g in found) or "none: its config has no pool seat"
        raise ConfigError(f"opponent {text!r}: the run's pools are {have}")

    def pool_seats(self, text: str) -> list[str]:
        """The seats in which every other group can be played by the pool's snapshots."""
        pool = self._pool(text)
        groups = self.parts.groups
        return [s for s in self.seats if all(seat_difference(groups[g], pool.spec) is None for g in groups if g != s)]

    def _play_pool(self, text: str, seat: str) -> EvalResult:
        """Against the run's snapshots: the episodes shared out between them, every other group one snapshot."""
        pool = self._pool(text)
        count, episodes = len(pool.snapshots), self.evaluator.episodes
        results = []
        for k in range(min(count, episodes)):
            others = [snapshot_actor(spec, pool, k) for g, spec in self.parts.groups.items() if g != seat]
            policy = TensorDictSequential(self.seats[seat], *others).to(self.cfg.train.device)
            share = episodes // count + (k < episodes % count)
            results.append(
                self.evaluator(policy=policy, episodes=share, deterministic=self.deterministic, callback=self._first())
            )
        return EvalResult.merged(results)

    def __call__(self) -> dict[tuple[str, str], tuple[EvalResult, Outcomes | None]]:
        """Every source in every seat (a pool: every seat whose other groups its snapshots can play)."""
        return {
            (text, seat): self.play(text, seat)
            for text, source in self.sources.items()
            for seat in (self.pool_seats(text) if source.pool else self.seats)
        }

    def ladder(self, run_dir) -> dict[str, float]:
        """A symmetric pool's payoff matrix and Elo ratings at the end of a run (``pool.payoff_episodes``):
        ``payoff.json`` and ``plots/payoff.png`` written, the ratings returned as ``eval/rating/<player>``."""
        from marl_ppo.run.payoff import play_payoff

        episodes = self.cfg.pool.payoff_episodes
        if not episodes or not self.parts.pools:
            return {}
        groups, env_fn = list(self.parts.groups), self.evaluator.env_fn
        evaluator = Evaluator(self.cfg, self.parts.policy, groups, episodes=episodes, env_fn=env_fn)
        try:
            payoff = play_payoff(self.cfg, self.parts, evaluator, episodes=episodes, fixed=self.cfg.log.eval_opponents)
        finally:
            evaluator.close()
        if payoff is None:
            return {}
        payoff.write(Path(run_dir))
        return payoff.metrics()

    def metrics(self) -> dict[str, float]:
        """``eval/vs_<source>/<seat>/...`` for every match that finished an episode."""
        out = {}
        for (text, seat), (_, result) in self().items():
            if result is not None:
                out.update(result.metrics(f"eval/vs_{source_label(text)}/{seat}"))
        return out
