"""A pool's payoff matrix and Elo ladder: its snapshots, the latest policy and fixed opponents, all pairs.

For a symmetric pool (``opponents: {player_2: pool:player_1}``: the two seats have identical specs),
every ordered pair of players plays ``episodes`` episodes with the first in the pooled group's seat
and the second in the pool seat, both sampling their actions (deterministic policies would replay
one game per pair). ``scores[i][j]`` is ``i``'s mean score against ``j`` over both seatings (a win 1,
a draw 1/2); the Elo ratings are fitted to it (:func:`~marl_ppo.opponents.ratings.fit_elo`). At the
end of a run with ``pool.payoff_episodes > 0`` the run writes ``plots/payoff.png`` and
``payoff.json`` and logs ``eval/rating/<player>``.

Players are named ``iter_<k>`` (the snapshot of iteration ``k``), ``latest`` and the fixed sources'
labels (``random``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tensordict.nn import TensorDictModuleBase, TensorDictSequential

from marl_ppo.config import Config
from marl_ppo.models.actor import build_actor, seat_actor
from marl_ppo.models.modules import Networks
from marl_ppo.opponents import count_outcomes, parse_source, source_label
from marl_ppo.opponents.ratings import fit_elo
from marl_ppo.options import ConfigError
from marl_ppo.run.build import Parts, build_opponent
from marl_ppo.run.evaluation import Evaluator

__all__ = ["Payoff", "play_payoff", "symmetric_pool", "snapshot_actor", "check_payoff"]


@dataclass
class Payoff:
    """Players, their pairwise scores (``None`` on the diagonal) and Elo ratings."""

    players: list[str]
    scores: list[list[float | None]]
    ratings: list[float]
    episodes: int

    def metrics(self) -> dict[str, float]:
        return {f"eval/rating/{p}": r for p, r in zip(self.players, self.ratings)}

    def write(self, run_dir: Path) -> Path:
        """``payoff.json`` and ``plots/payoff.png`` in ``run_dir``; returns the plot's path."""
        (run_dir / "payoff.json").write_text(json.dumps(asdict(self), indent=2) + "\n")
        return plot_payoff(self, run_dir / "plots" / "payoff.png")


def symmetric_pool(parts: Parts) -> tuple[str, str] | None:
    """``(pooled group, pool seat)`` of the first pool seat that plays another group's networks (``pool:GROUP``),
    in a two-group game (each player of the matrix fills both seats; with more groups there is no pairing)."""
    if len(parts.groups) != 2:
        return None
    losses, networks = parts.router.losses, parts.router.networks
    for seat in parts.pools:
        net = networks.of(losses[seat].actor_network)
        for g in parts.router.groups:
            if g != seat and networks.of(losses[g].actor_network) is net:
                return g, seat
    return None


def check_payoff(cfg: Config, parts: Parts) -> None:
    """A ConfigError for ``pool.payoff_episodes`` on a run without a symmetric pool: the matrix would be
    silently skipped at the end of the run."""
    if cfg.pool.payoff_episodes and symmetric_pool(parts) is None:
        raise ConfigError(
            f"pool.payoff_episodes={cfg.pool.payoff_episodes}: the payoff matrix needs a symmetric pool (two "
            "groups, one seat playing the other's snapshots: opponents: {SEAT: pool:GROUP}); this run has "
            f"opponents {dict(cfg.opponents) or 'none'}: set pool.payoff_episodes=0"
        )


def snapshot_actor(spec, pool, k: int):
    """Snapshot ``k`` of ``pool`` as a frozen actor on the keys of ``spec``."""
    net = copy.deepcopy(pool.snapshots.template).requires_grad_(False)
    with torch.no_grad():
        for name, p in net.named_parameters():
            p.copy_(pool.snapshots.params[name][k])
    if isinstance(net, TensorDictModuleBase):  # a policy with a trunk, snapshotted whole: moved to spec's seat
        return seat_actor(spec, net, Networks(), what=f"snapshot {k} of pool {pool.spec.name!r}")
    return build_actor(spec, net=net)


def play_payoff(cfg: Config, parts: Parts, evaluator: Evaluator, *, episodes: int, fixed=()) -> Payoff | None:
    """Every pair of the symmetric pool's players, ``episodes`` episodes per ordered pair (``None``: no such pool)."""
    pair = symmetric_pool(parts)
    if pair is None:
        return None
    group, seat = pair
    pool, specs = parts.pools[seat], {g: parts.router.groups[g] for g in pair}
    live = parts.router.losses[group].actor_network
    players: dict[str, dict[str, object]] = {}
    for k, it in enumerate(pool.snapshots.taken_at):
        players[f"iter_{it}"] = {g: snapshot_actor(specs[g], pool, k) for g in pair}
    players["latest"] = {g: seat_actor(specs[g], live, parts.router.networks) for g in pair}
    for text in fixed:
        source = parse_source(f"opponent {text!r}", text)
        players[source_label(text)] = {
            g: build_opponent(cfg, f"opponent {text!r}", source, parts.groups[g]) for g in pair
        }
    names = list(players)
    won = [[0.0] * len(names) for _ in names]
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i == j:
                continue
            policy = TensorDictSequential(players[a][group], players[b][seat])
            result = evaluator(policy=policy, deterministic=False)
            counts = count_outcomes(result.per_episode, group)
            won[i][j] += counts.win_rate + 0.5 * counts.draw_rate  # a as the pooled group's seat
            won[j][i] += counts.loss_rate + 0.5 * counts.draw_rate  # b in the pool seat
    scores = [[None if i == j else won[i][j] / 2 for j in range(len(names))] for i in range(len(names))]
    return Payoff(names, scores, fit_elo(scores), episodes)


def plot_payoff(payoff: Payoff, path: Path) -> Path:
    """A heat map of ``payoff.scores`` (row player's score against the column player), ratings in the labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(payoff.players)
    grid = [[float("nan") if s is None else s for s in row] for row in payoff.scores]
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * n, 0.8 + 0.5 * n))
    image = ax.imshow(grid, cmap="RdBu", vmin=0.0, vmax=1.0)
    labels = [f"{p} ({r:.0f})" for p, r in zip(payoff.players, payoff.ratings)]
    ax.set_xticks(range(n), payoff.players, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    for i in range(n):
        for j in range(n):
            if i != j:
                ax.text(j, i, f"{grid[i][j]:.2f}", ha="center", va="center", fontsize=6)
    ax.set_title(
        f"score of the row against the column\n({payoff.episodes} episodes per seating; Elo in the labels)", fontsize=9
    )
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
