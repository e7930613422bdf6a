"""Wins, draws and losses of one seat, from the env's own rewards.

An episode is a **win** for a seat when the seat's return is higher than every other group's, a
**draw** when it ties the highest, a **loss** otherwise (returns are each group's mean over its
agents, as the evaluation reports them). In tic-tac-toe that is +1 / 0 / -1 for the seat.

>>> o = count_outcomes({"player_1": [1.0, 0.0, -1.0, 1.0], "player_2": [-1.0, 0.0, 1.0, -1.0]}, "player_1")
>>> o.wins, o.draws, o.losses, o.win_rate
(2, 1, 1, 0.5)
>>> o.metrics("eval/vs_random/player_1")["eval/vs_random/player_1/loss_rate"]
0.25
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Outcomes", "count_outcomes", "wilson"]


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a rate of ``k`` in ``n`` (95 % by default): it stays inside [0, 1] and
    keeps its width at 0 or ``n`` successes, where the normal approximation collapses. Written by hand:
    three lines, where scipy or statsmodels would be a dependency.

    >>> [round(x, 4) for x in wilson(5, 10)], [round(x, 4) for x in wilson(0, 10)]
    ([0.2366, 0.7634], [0.0, 0.2775])
    """
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * (p * (1 - p) / n + z2 / (4 * n * n)) ** 0.5 / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Outcomes:
    """A seat's counts over ``episodes`` and the mean returns of the seat and of the other groups."""

    seat: str
    episodes: int
    wins: int
    draws: int
    losses: int
    seat_return: float
    others_return: float

    @property
    def win_rate(self) -> float:
        return self.wins / self.episodes

    @property
    def draw_rate(self) -> float:
        return self.draws / self.episodes

    @property
    def loss_rate(self) -> float:
        return self.losses / self.episodes

    def metrics(self, prefix: str) -> dict[str, float]:
        """``{prefix}/win_rate``, ``draw_rate``, ``loss_rate``, ``episode_reward`` and ``episodes``."""
        return {
            f"{prefix}/win_rate": self.win_rate,
            f"{prefix}/draw_rate": self.draw_rate,
            f"{prefix}/loss_rate": self.loss_rate,
            f"{prefix}/episode_reward": self.seat_return,
            f"{prefix}/episodes": float(self.episodes),
        }

    def intervals(self) -> dict[str, tuple[float, float]]:
        """The 95 % Wilson interval of each rate: ``win_rate``, ``draw_rate``, ``loss_rate``."""
        counts = {"win_rate": self.wins, "draw_rate": self.draws, "loss_rate": self.losses}
        return {name: wilson(k, self.episodes) for name, k in counts.items()}

    def line(self) -> str:
        """One line for a terminal (each rate with its 95 % Wilson interval)."""
        ci = {name: f"[{lo:.1%}, {hi:.1%}]" for name, (lo, hi) in self.intervals().items()}
        return (
            f"{self.seat}: {self.episodes} episodes, win {self.win_rate:.1%} {ci['win_rate']} draw "
            f"{self.draw_rate:.1%} {ci['draw_rate']} loss {self.loss_rate:.1%} {ci['loss_rate']} (wins "
            f"{self.wins}, draws {self.draws}, losses {self.losses}); mean return {self.seat_return:.3f}, "
            f"opponents' {self.others_return:.3f}"
        )


def count_outcomes(per_episode: Mapping[str, Sequence[float]], seat: str) -> Outcomes:
    """Counts ``seat``'s wins, draws and losses over aligned per-episode returns of every group."""
    others = [g for g in per_episode if g != seat]
    if seat not in per_episode or not others:
        raise ValueError(f"outcomes need the seat {seat!r} and at least one other group; got {list(per_episode)}")
    mine = list(per_episode[seat])
    if not mine:
        raise ValueError(f"no finished episode to count for seat {seat!r}")
    wins = draws = 0
    others_mean = []
    for i, r in enumerate(mine):
        best = max(per_episode[g][i] for g in others)
        others_mean.append(sum(per_episode[g][i] for g in others) / len(others))
        wins += r > best
        draws += r == best
    n = len(mine)
    return Outcomes(seat, n, wins, draws, n - wins - draws, sum(mine) / n, sum(others_mean) / n)
