"""Scripted tic-tac-toe players for the opponent tests: PettingZoo's contract, act(observation, action_mask)."""

from __future__ import annotations

import numpy as np

SEEN: list[tuple[np.ndarray, np.ndarray]] = []  # what first_legal_recorded was given, in order


def first_legal(observation, action_mask):
    """The lowest legal square."""
    return int(np.flatnonzero(action_mask)[0])


def first_legal_recorded(observation, action_mask):
    SEEN.append((observation.copy(), action_mask.copy()))
    return first_legal(observation, action_mask)


def occupied(observation, action_mask):
    """An illegal move whenever there is one: the first occupied square."""
    taken = np.flatnonzero(~action_mask)
    return int(taken[0]) if len(taken) else 0


# the example of docs/opponents.md, kept equal to it by a test
def greedy(observation, action_mask):
    """Completes a line of its own when it can, blocks one of the opponent's, else the first legal square."""
    board = (observation[..., 0] - observation[..., 1]).flatten()  # square s: +1 own mark, -1 the opponent's
    for sign in (1, -1):
        for square in np.flatnonzero(action_mask):
            trial = board.copy()
            trial[square] = sign
            lines = trial.reshape(3, 3)
            if any(abs(s) == 3 for s in (*lines.sum(0), *lines.sum(1), lines.trace(), np.fliplr(lines).trace())):
                return int(square)
    return int(np.flatnonzero(action_mask)[0])


_RNG = np.random.default_rng(0)


def mostly_rock(observation, action_mask):
    """Rock-paper-scissors: rock 80 % of the time, paper and scissors 10 % each (a fixed, biased player)."""
    return int(_RNG.choice(3, p=[0.8, 0.1, 0.1]))
