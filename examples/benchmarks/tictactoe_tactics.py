"""Tic-tac-toe tactics of a trained run: does its greedy move take a win in one, and block one?

Win and loss rates against a random player say how often a policy loses, not why. This script
plays random games on the run's own env and, at every turn of each seat, asks the run's policy for
its greedy move (the deterministic evaluation's):

* ``can win``: the seat has two in a line and the third square free; ``took it``: the move wins;
* ``must block``: the seat cannot win at once but the other player has two in a line and the third
  square free; ``blocked``: the move takes such a square.

A policy that plays tic-tac-toe well takes nearly every win and blocks nearly every threat.

    .venv/bin/python examples/benchmarks/tictactoe_tactics.py runs/tictactoe_v3-mappo-seed0 --steps 400
"""

from __future__ import annotations

import argparse

import torch
from torchrl.envs.utils import ExplorationType, set_exploration_type

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def open_lines(marks: list[int], free: list[bool]) -> list[tuple[int, ...]]:
    """The lines holding two of ``marks`` (0/1 per square) and a free third square."""
    return [line for line in LINES if sum(marks[i] for i in line) == 2 and any(free[i] for i in line)]


def classify(observation: torch.Tensor, legal: torch.Tensor, move: int) -> tuple[str, bool] | None:
    """``("win", took it)``, ``("block", blocked)`` or ``None`` for one turn; ``observation`` is the
    flat ``[3, 3, 2]`` board (own marks in channel 0), ``legal`` the action mask (square ``i`` = action ``i``)."""
    board = observation.reshape(9, 2)
    mine, theirs = board[:, 0].int().tolist(), board[:, 1].int().tolist()
    free = [bool(legal[i]) and not mine[i] and not theirs[i] for i in range(9)]
    wins = open_lines(mine, free)
    if wins:
        return "win", any(move in line for line in wins)
    threats = open_lines(theirs, free)
    if threats:
        return "block", any(move in line for line in threats)
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--steps", type=int, default=400, help="steps of random play on the run's env copies")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    from marl_ppo.run.build import load_policy

    _, parts = load_policy(args.run_dir)
    env, seats = parts.env, list(parts.groups)
    generator = torch.Generator().manual_seed(args.seed)
    counts = {(seat, kind): [0, 0] for seat in seats for kind in ("win", "block")}
    td = env.reset()
    for _ in range(args.steps):
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            greedy = parts.policy(td.clone())
        for seat in seats:
            for e in torch.nonzero(td[seat, "mask"][:, 0]).flatten().tolist():
                move = int(greedy[seat, "action"][e, 0])
                found = classify(td[seat, "observation"][e, 0], td[seat, "action_mask"][e, 0], move)
                if found is not None:
                    counts[seat, found[0]][0] += 1
                    counts[seat, found[0]][1] += found[1]
        for seat in seats:  # random play moves the games on
            legal = td[seat, "action_mask"][:, 0].float()
            td[seat, "action"] = torch.multinomial(legal, 1, generator=generator)
        _, td = env.step_and_maybe_reset(td)
    env.close()
    print("| seat | can win | took it | must block | blocked |")
    print("|---|---:|---:|---:|---:|")
    for seat in seats:
        (w, took), (b, blocked) = counts[seat, "win"], counts[seat, "block"]
        print(f"| {seat} | {w} | {took / max(w, 1):.3f} | {b} | {blocked / max(b, 1):.3f} |")


if __name__ == "__main__":
    main()
