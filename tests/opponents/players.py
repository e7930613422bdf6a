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
