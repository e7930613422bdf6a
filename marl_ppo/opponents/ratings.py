"""Elo ratings fitted to a payoff matrix: who beats whom, on one scale.

Players (a pool's snapshots, the latest policy, fixed opponents such as ``random``) play each other
in both seats; ``scores[i][j]`` is ``i``'s score against ``j`` (a win 1, a draw 1/2, a loss 0, averaged
over their games). :func:`fit_elo` finds the ratings whose Elo expectation
``1 / (1 + 10 ** ((r_j - r_i) / 400))`` best fits every pair's score (the Bradley-Terry maximum
likelihood, by gradient ascent), anchored so that the ratings average ``mean``. Unlike Elo's
game-by-game updates, the result does not depend on the order of the games.

Written by hand: no maintained package fits Elo ratings to a payoff matrix (TrueSkill's packages
update game by game and are unmaintained).

>>> r = fit_elo([[0.5, 0.76], [0.24, 0.5]], mean=1000.0)
>>> round(r[0] - r[1])  # a 76 % score is about 200 Elo points
200
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["fit_elo", "expected_score", "elo_update", "ELO_K"]

ELO_K = 16.0  # the points a rating moves per unit of surprise in one batch of games


def expected_score(r_i: float, r_j: float) -> float:
    """Elo's expected score of a player rated ``r_i`` against one rated ``r_j``."""
    return 1.0 / (1.0 + 10.0 ** ((r_j - r_i) / 400.0))


def fit_elo(
    scores: Sequence[Sequence[float | None]], *, mean: float = 1000.0, cap: float = 0.99, tol: float = 1e-6
) -> list[float]:
    """Ratings fitted to ``scores`` (``None`` where a pair did not play; the diagonal is ignored).

    Scores are clipped to ``[1 - cap, cap]``, so that a player who won every game gets a finite rating.
    Each step moves every rating by 16 Elo points per unit of its total surprise (Elo's K/2), until
    no rating moves by more than ``tol``.
    """
    n = len(scores)
    pairs = [
        (i, j, min(max(float(scores[i][j]), 1 - cap), cap))
        for i in range(n)
        for j in range(n)
        if i != j and scores[i][j] is not None
    ]
    ratings = [0.0] * n
    for _ in range(100_000):
        surprise = [0.0] * n
        for i, j, s in pairs:
            surprise[i] += s - expected_score(ratings[i], ratings[j])
        ratings = [r + 16.0 * d for r, d in zip(ratings, surprise)]
        if max(map(abs, surprise), default=0.0) * 16.0 < tol:
            break
    shift = mean - sum(ratings) / n if n else 0.0
    return [r + shift for r in ratings]


def elo_update(
    ratings: Sequence[float], latest: float, games: Sequence[int], scores: Sequence[float], *, k: float = ELO_K
) -> tuple[list[float], float]:
    """Elo's update of a pool's snapshot ``ratings`` and the ``latest`` policy's rating from one batch of
    games between them: snapshot ``i`` played ``games[i]`` games and scored ``scores[i]`` in all (a win 1,
    a draw 1/2). Every game of the batch is rated at the ratings before it (the order inside a batch does
    not matter); the latest policy gains what the snapshots lose.

    >>> elo_update([1000.0, 1200.0], 1000.0, [2, 0], [2.0, 0.0])  # two wins of an equal snapshot
    ([1016.0, 1200.0], 984.0)
    """
    deltas = [k * (s - n * expected_score(r, latest)) for r, n, s in zip(ratings, games, scores, strict=True)]
    return [r + d for r, d in zip(ratings, deltas)], latest - sum(deltas)
