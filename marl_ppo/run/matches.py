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
                out[g] = seat_actor(spec, router.losses[t].actor_network, what=f"group {t!r}'s policy")
                break
    return out


class Matches:
    """Plays ``sources`` against the trained policy in ``seat`` (``None``: every seat it can take)."""

    def __init__(
        self, cfg: Config, parts: Parts, sources: Sequence[str], evaluator: Evaluator, *, seat: str | None = None
    ) -> None:
        self.cfg, self.parts, self.evaluator = cfg, parts, evaluator
        self.sources = {text: parse_source(f"opponent {text!r}", text) for text in sources}
        self.seats = seats(parts) if self.sources else {}
        if len(parts.groups) < 2 and self.sources:
            raise ConfigError(f"an opponent needs a second group to play; the env has only {list(parts.groups)}")
        if seat is not None:
            if seat not in self.seats:
                raise ConfigError(f"--seat {seat!r}: the trained policy can play {sorted(self.seats)}")
            self.seats = {seat: self.seats[seat]}
        self._players: dict[tuple[str, str], object] = {}  # (source, group) -> player, built once

    def _player(self, text: str, group: str):
        if (text, group) not in self._players:
            spec = self.parts.groups[group]
            self._players[text, group] = build_opponent(self.cfg, f"opponent {text!r}", self.sources[text], spec)
        return self._players[text, group]

    def play(self, text: str, seat: str) -> tuple[EvalResult, Outcomes | None]:
        """One source against the trained policy in ``seat``: the evaluation and the seat's outcomes."""
        others = [self._player(text, g).to(self.cfg.train.device) for g in self.parts.groups if g != seat]
        result = self.evaluator(policy=TensorDictSequential(self.seats[seat], *others))
        return result, (count_outcomes(result.per_episode, seat) if result.episodes else None)

    def __call__(self) -> dict[tuple[str, str], tuple[EvalResult, Outcomes | None]]:
        """Every source in every seat."""
        return {(text, seat): self.play(text, seat) for text in self.sources for seat in self.seats}

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
