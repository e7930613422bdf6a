"""Elo ratings fitted to a payoff matrix: known answers."""

from __future__ import annotations

import math

import pytest

from marl_ppo.opponents.ratings import expected_score, fit_elo


def test_a_76_percent_score_is_200_elo_points():
    r = fit_elo([[None, 0.76], [0.24, None]], mean=1000.0)
    assert r[0] - r[1] == pytest.approx(400 * math.log10(0.76 / 0.24), abs=1e-3)
    assert sum(r) / 2 == pytest.approx(1000.0)


def test_scores_drawn_from_elo_ratings_give_those_ratings_back():
    true = [1300.0, 1000.0, 950.0, 750.0]
    scores = [[None if i == j else expected_score(a, b) for j, b in enumerate(true)] for i, a in enumerate(true)]
    fitted = fit_elo(scores, mean=sum(true) / len(true))
    for a, b in zip(fitted, true):
        assert a == pytest.approx(b, abs=1e-2)


def test_a_player_who_won_everything_gets_a_finite_rating_above_the_others():
    r = fit_elo([[None, 1.0, 1.0], [0.0, None, 0.5], [0.0, 0.5, None]])
    assert all(math.isfinite(x) for x in r) and r[0] > r[1] + 300 and r[1] == pytest.approx(r[2])


def test_pairs_that_did_not_play_are_left_out():
    r = fit_elo([[None, 0.76, None], [0.24, None, 0.76], [None, 0.24, None]])
    assert r[0] - r[1] == pytest.approx(r[1] - r[2], abs=1e-3)
