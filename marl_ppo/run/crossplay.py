"""Cross-play: trained runs of one env seated beside each other, and the matrix of their team returns.

A *seating* says which agents the run plays and which its *partner* (another run) plays: whole groups
(tic-tac-toe's ``player_1`` beside another run's ``player_2``) or, in a group of several agents,
agents by index (``agents:0``: the run plays agent 0 of VMAS ``simple_reference``'s one group, the
partner the other). By default the run plays the env's first group and the partner every other; in
an env of one group, the run plays its first agent and the partner the others.

The partner is another run's group as a frozen player, its ``checkpoint:RUN_DIR:GROUP`` opponent
source (:func:`~marl_ppo.run.opponents.make_player`), the run's side its seats' actors
(:func:`~marl_ppo.run.matches.seats`); they play on the run's evaluation envs
(:class:`~marl_ppo.run.evaluation.Evaluator`: its seed, its episodes), so a run beside itself plays
exactly the episodes of its own ``marl-ppo eval``. Both runs must be of one env with the same groups.

The measure is the *team return* of an episode, beside each group's return: the mean over every agent
of its episode return (an env that gives every agent the team's reward: Hanabi's score), or with
``team="sum"`` their sum (an env that gives each agent its share: Overcooked's cooks their deliveries).
:func:`crossplay` plays every ordered pair ``(i, j)`` of a set of runs (the seeds of one config), run
``i`` in its seats and run ``j`` as its partner: cell ``[i][j]`` of the matrix. As in Hu et al.,
"Other-Play for Zero-Shot Coordination" (ICML 2020), the *self-play score* (the diagonal: each run with
itself) stands against the *cross-play score* (off the diagonal: partners never met in training); their gap
is how much of a run's coordination rests on conventions only its own training shares.

The runs are the sampling units: run ``i``'s self-play score is ``M[i][i]``, its cross-play score the
mean of the cells where it plays beside another run in either role (row ``i`` and column ``i`` off the
diagonal), its gap the difference. Their means over the runs are the diagonal's mean, the
off-diagonal's mean and the gap, each with the 95 % interval of the mean over runs
(:func:`marl_ppo.stats.mean_interval`: Student's t below 10 runs; none below 3 runs, as a seed group's).

>>> scores = self_cross_gap([[4.0, 1.0], [3.0, 2.0]])
>>> scores["self_play"]["mean"], scores["cross_play"]["mean"], scores["gap"]["mean"], scores["gap"]["per_run"]
(3.0, 2.0, 1.0, [2.0, 0.0])
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential

from marl_ppo.config import Config, from_yaml
from marl_ppo.groups.specs import GroupSpec, seat_difference
from marl_ppo.models.recurrent import state_spec
from marl_ppo.opponents import parse_source
from marl_ppo.options import ConfigError
from marl_ppo.run.build import load_policy
from marl_ppo.run.evaluation import EvalResult, Evaluator
from marl_ppo.run.group_result import MIN_INTERVAL_SEEDS, TOO_FEW
from marl_ppo.run.matches import seats
from marl_ppo.run.opponents import make_player
from marl_ppo.stats import METHOD_TEXT, mean_interval

__all__ = [
    "Seating",
    "AgentSplit",
    "Partners",
    "team_returns",
    "self_cross_gap",
    "crossplay",
    "plot_crossplay",
    "CROSSPLAY_JSON",
]

CROSSPLAY_JSON = "crossplay.json"
MEASURES = {  # the team return of an episode, from every agent's episode return
    "mean": "team return per episode: the mean of every agent's episode return (each agent gets the team's reward)",
    "sum": "team return per episode: the sum of every agent's episode return (each agent gets its share of it)",
}
REFERENCE = (
    'Hu et al., "Other-Play for Zero-Shot Coordination", ICML 2020: self-play score (the diagonal, each run with '
    "itself) vs cross-play score (off the diagonal, runs never trained together)"
)
INTERVAL = (
    f"{METHOD_TEXT['auto']}, over runs (none below {MIN_INTERVAL_SEEDS} runs); run i's cross-play score: its cells "
    "beside another run, row and column"
)
# what makes two runs' envs one game (the copies, devices and time-limit flag do not)
GAME_FIELDS = ("kind", "scenario", "factory", "continuous_actions", "multidiscrete_actions", "comm", "image", "kwargs")


@dataclasses.dataclass(frozen=True)
class Seating:
    """Which agents the run plays: ``owner[group][k]`` is ``True`` where the run plays agent ``k`` of the
    group, ``False`` where its partner does."""

    owner: dict[str, tuple[bool, ...]]

    @classmethod
    def parse(cls, groups: dict[str, GroupSpec], given: Sequence[str] | None) -> Seating:
        """The seating of ``--seat`` words (``GROUP`` or ``GROUP:AGENT``, an agent by index or name); none:
        the first group (one group: its first agent). A ConfigError names what would work."""
        names = list(groups)
        if not given:
            given = [names[0]] if len(names) > 1 else [f"{names[0]}:0"]
        owner = {g: [False] * groups[g].n_agents for g in names}
        for word in given:
            group, sep, agent = word.partition(":")
            if group not in groups:
                raise ConfigError(
                    f"--seat {word!r}: the env's groups are {names} (GROUP, or GROUP:AGENT for one agent)"
                )
            agents = groups[group].agents
            if not sep:
                owner[group] = [True] * len(agents)
            elif agent.isdigit() and int(agent) < len(agents) or agent in agents:
                owner[group][int(agent) if agent.isdigit() else agents.index(agent)] = True
            else:
                raise ConfigError(
                    f"--seat {word!r}: group {group!r} has agents 0..{len(agents) - 1} ({', '.join(agents)})"
                )
        if all(all(row) for row in owner.values()):
            raise ConfigError(
                f"--seat {' '.join(given)}: the run would play every agent and its partner none (cross-play seats "
                f"two groups, or the agents of a group of several; this env's: {groups_line(groups)})"
            )
        return cls({g: tuple(row) for g, row in owner.items()})

    def labels(self, side: bool) -> list[str]:
        """The seats of the run (``side=True``) or of its partner, as ``--seat`` writes them."""
        out = []
        for g, row in self.owner.items():
            if all(x == side for x in row):
                out.append(g)
            else:
                out += [f"{g}:{k}" for k, x in enumerate(row) if x == side]
        return out


def groups_line(groups: dict[str, GroupSpec]) -> str:
    """``g (2 agents), h (1 agent)``."""
    return ", ".join(f"{g} ({s.n_agents} agent{'s' if s.n_agents > 1 else ''})" for g, s in groups.items())


class AgentSplit(TensorDictModuleBase):
    """Two policies of one group, each playing some of its agents: both run on the whole group (their own
    copies of the entries), and every entry they write under the group (action, log-prob, recurrent state)
    is ``run``'s for the agents ``mine`` marks and ``partner``'s for the others. A policy whose agents read
    each other (a GNN) still sees every agent's observation, as in its own training."""

    def __init__(self, group: str, run: TensorDictModuleBase, partner: TensorDictModuleBase, mine: Sequence[bool]):
        super().__init__()
        self.group, self.run, self.partner = group, run, partner
        self.register_buffer("mine", torch.tensor(list(mine), dtype=torch.bool))
        self.in_keys = list(dict.fromkeys([*run.in_keys, *partner.in_keys]))
        self.out_keys = list(dict.fromkeys([*run.out_keys, *partner.out_keys]))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        ours, theirs = self.run(tensordict.copy()), self.partner(tensordict.copy())
        dim = tensordict.batch_dims  # a group's entries are [*B, n_agents, ...]

        def pick(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.where(self.mine.view(-1, *[1] * (a.ndim - dim - 1)), a, b)

        for key in self.out_keys:
            a, b = ours.get(key, None), theirs.get(key, None)
            path = key if isinstance(key, tuple) else (key,)
            if a is None or b is None or self.group not in path[:2]:  # one side's own entry
                tensordict.set(key, b if a is None else a)
            else:
                tensordict.set(key, a.apply(pick, b) if isinstance(a, TensorDictBase) else pick(a, b))
        return tensordict


def team_returns(result: EvalResult, groups: dict[str, GroupSpec], team: str = "mean") -> list[float]:
    """Each episode's team return: the ``mean`` of every agent's return (each group's, weighted by its agents:
    an env that gives every agent the team's reward, Hanabi's), or their ``sum`` (an env that gives each agent
    its own share, Overcooked's cooks their own deliveries)."""
    total = sum(groups[g].n_agents for g in result.per_episode) if team == "mean" else 1
    per_group = [np.asarray(xs, dtype=float) * groups[g].n_agents for g, xs in result.per_episode.items()]
    return (sum(per_group) / total).tolist()


def same_game(configs: Sequence[tuple[str, Config]], *, max_steps: int | None) -> None:
    """A ConfigError, in one line naming the difference, where the runs' envs are not one game (their
    episodes' cap included, unless ``max_steps`` sets it for all)."""
    fields = GAME_FIELDS if max_steps is not None else (*GAME_FIELDS, "max_steps")
    (first, a), rest = configs[0], configs[1:]
    for name, b in rest:
        for f in fields:
            x, y = getattr(a.env, f), getattr(b.env, f)
            if x != y:
                raise ConfigError(
                    f"runs {first} and {name} are not of one env: env.{f} is {x!r} in the first, {y!r} in the "
                    "second (cross-play seats runs of one env and groups)"
                    + (" (or give --max-steps N for both)" if f == "max_steps" else "")
                )


def same_groups(named: Sequence[tuple[str, dict[str, GroupSpec]]]) -> None:
    """A ConfigError, in one line, where the runs' envs do not have the same groups with the same specs."""
    (first, a), rest = named[0], named[1:]
    for name, b in rest:
        if list(a) != list(b):
            raise ConfigError(f"runs {first} and {name} have different groups: {list(a)} and {list(b)}")
        for g in a:
            why = seat_difference(a[g], b[g])
            if why is not None:
                raise ConfigError(f"runs {first} and {name} differ in group {g!r}: {why}")


class Partners:
    """Runs loaded once each, any of them seated beside any other: :meth:`play` ``(i, j)`` runs ``i`` in its
    seats of ``seating`` (``--seat`` words) beside run ``j``, on run ``i``'s evaluation envs."""

    def __init__(
        self,
        run_dirs: Sequence[str | Path],
        *,
        episodes: int,
        seating: Sequence[str] | None = None,
        checkpoints: Sequence[str] | None = None,
        device: str | None = None,
        max_steps: int | None = None,
        sample: bool = False,
        video: bool = False,
        team: str = "mean",
    ) -> None:
        if team not in MEASURES:
            raise ConfigError(f"the team return is the mean or the sum of the agents' returns, got {team!r}")
        self.run_dirs = [Path(d) for d in run_dirs]
        for d in self.run_dirs:
            if not (d / "config.yaml").is_file():
                raise ConfigError(f"{d} is not a run directory (no config.yaml)")
        same_game([(str(d), from_yaml((d / "config.yaml").read_text())) for d in self.run_dirs], max_steps=max_steps)
        checkpoints = list(checkpoints or ["last.pt"] * len(self.run_dirs))
        self.loaded = [load_policy(d, c, device=device) for d, c in zip(self.run_dirs, checkpoints)]
        self._by_dir = {d.resolve(): run for d, run in zip(self.run_dirs, self.loaded)}
        self._evaluators: dict[tuple, Evaluator] = {}
        try:
            same_groups([(str(d), parts.groups) for d, (_, parts) in zip(self.run_dirs, self.loaded)])
            self.groups = self.loaded[0][1].groups
            self.seating = Seating.parse(self.groups, seating)
        except ConfigError:
            self.close()
            raise
        self.episodes, self.max_steps, self.video = episodes, max_steps, video
        self.deterministic = False if sample else None  # None: each run's log.eval_deterministic
        self.team, self.measure = team, MEASURES[team]
        self._players: dict[tuple[int, str], Any] = {}

    def _own(self, i: int, group: str):
        """Run ``i``'s actor for ``group`` (a group it trained, or one of the same specs)."""
        cfg, parts = self.loaded[i]
        actors = seats(parts)
        if group not in actors:
            raise ConfigError(f"--seat {group}: run {self.run_dirs[i]} can play the groups {sorted(actors)}")
        return actors[group].to(cfg.train.device)

    def _partner(self, i: int, j: int, group: str):
        """Run ``j``'s policy of ``group``, frozen: the ``checkpoint:`` source's player (built once)."""
        if (j, group) not in self._players:
            cfg = self.loaded[i][0]
            key = f"partner {self.run_dirs[j]}"
            source = parse_source(key, f"checkpoint:{self.run_dirs[j]}:{group}")
            player = make_player(cfg, key, source, self.groups[group], load_run=self._load)
            self._players[j, group] = player.to(cfg.train.device)
        return self._players[j, group]

    def _load(self, run_dir: str | Path, device: str | None = None):
        return self._by_dir[Path(run_dir).expanduser().resolve()]  # loaded once, in __init__

    def policy(self, i: int, j: int) -> TensorDictSequential:
        """Run ``i`` in its seats, run ``j`` in the others, every group in the env's order."""
        modules = []
        for g, row in self.seating.owner.items():
            if all(row):
                modules.append(self._own(i, g))
            elif not any(row):
                modules.append(self._partner(i, j, g))
            else:
                modules.append(AgentSplit(g, self._own(i, g), self._partner(i, j, g), row))
        return TensorDictSequential(*modules)

    def play(self, i: int, j: int, callback=None) -> EvalResult:
        """Run ``i`` beside run ``j``: ``episodes`` episodes on run ``i``'s evaluation envs."""
        policy = self.policy(i, j)
        spec = state_spec(policy)  # the envs carry the recurrent entries the pair's policies read
        key = (i, None if spec is None else tuple(sorted(map(str, spec.keys(True, True)))))
        if key not in self._evaluators:
            cfg = self.loaded[i][0]
            self._evaluators[key] = Evaluator(
                cfg, policy, list(self.groups), episodes=self.episodes, max_steps=self.max_steps, video=self.video
            )
        result = self._evaluators[key](policy=policy, deterministic=self.deterministic, callback=callback)
        if not result.episodes:
            raise RuntimeError(f"run {self.run_dirs[i]} beside {self.run_dirs[j]}: {result.no_episode_message()}")
        return result

    def cell(self, i: int, j: int, callback=None) -> dict[str, Any]:
        """One pair's result: the team return's mean, sd and episodes, and each group's mean return."""
        result = self.play(i, j, callback)
        team = np.asarray(team_returns(result, self.groups, self.team))
        sd = float(team.std(ddof=1)) if len(team) > 1 else None
        return {"mean": float(team.mean()), "sd": sd, "n": len(team), "groups": result.returns}

    def close(self) -> None:
        """Closes the evaluation envs and the loaded runs' envs."""
        for evaluator in self._evaluators.values():
            evaluator.close()
        for _, parts in self.loaded:
            if not parts.env.is_closed:
                parts.env.close()


def _statistics(values: np.ndarray) -> dict[str, Any]:
    low, high, method = mean_interval(values)
    out = {"mean": float(values.mean()), "ci95": [float(low), float(high)], "method": method}
    out["per_run"] = values.tolist()
    if len(values) < MIN_INTERVAL_SEEDS:
        out["ci95"], out["no_interval"] = None, f"{TOO_FEW} ({len(values)} < {MIN_INTERVAL_SEEDS})"
    return out


def self_cross_gap(matrix: Sequence[Sequence[float]] | np.ndarray) -> dict[str, dict[str, Any]]:
    """The self-play score (the diagonal), the cross-play score (off it) and their gap, each its mean, the
    per-run values (see the module docstring) and the 95 % bootstrap interval of their mean over runs."""
    m = np.asarray(matrix, dtype=float)
    n = len(m)
    if m.shape != (n, n) or n < 2:
        raise ValueError(f"a cross-play matrix is square, of 2 runs or more, got shape {m.shape}")
    off = ~np.eye(n, dtype=bool)
    inside = np.where(off, m, 0.0)
    selfs = np.diag(m).copy()
    cross = (inside.sum(axis=1) + inside.sum(axis=0)) / (2 * (n - 1))
    out = {"self_play": _statistics(selfs), "cross_play": _statistics(cross), "gap": _statistics(selfs - cross)}
    # the means exactly as the matrix gives them (the per-run values' means, to rounding)
    out["self_play"]["mean"], out["cross_play"]["mean"] = float(selfs.mean()), float(m[off].mean())
    out["gap"]["mean"] = out["self_play"]["mean"] - out["cross_play"]["mean"]
    return out


def _labels(run_dirs: Sequence[Path]) -> list[str]:
    names = [d.name for d in run_dirs]
    return (
        names if len(set(names)) == len(names) else [f"{i}: {d.parent.name}/{d.name}" for i, d in enumerate(run_dirs)]
    )


def crossplay(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    *,
    episodes: int = 10,
    seating: Sequence[str] | None = None,
    checkpoint: str = "last.pt",
    device: str | None = None,
    max_steps: int | None = None,
    sample: bool = False,
    team: str = "mean",
    progress=None,
) -> dict[str, Any]:
    """Every ordered pair of the runs (see the module docstring): ``crossplay.json``, ``crossplay.png`` and
    ``crossplay.svg`` written in ``out``; returns what the JSON holds. ``progress(i, j, cell)`` is called
    after each pair."""
    dirs = [Path(d) for d in run_dirs]
    if len(dirs) < 2:
        raise ConfigError(f"cross-play needs two runs or more (the seeds of one config), got {[str(d) for d in dirs]}")
    partners = Partners(
        dirs, episodes=episodes, seating=seating, checkpoints=[checkpoint] * len(dirs), device=device,
        max_steps=max_steps, sample=sample, team=team,
    )  # fmt: skip
    try:
        cells = []
        for i in range(len(dirs)):
            cells.append([])
            for j in range(len(dirs)):
                cells[i].append(partners.cell(i, j))
                if progress is not None:
                    progress(i, j, cells[i][j])
    finally:
        partners.close()
    matrix = [[c["mean"] for c in row] for row in cells]
    result = {
        "measure": partners.measure,
        "reference": REFERENCE,
        "runs": [str(d) for d in dirs],
        "labels": _labels(dirs),
        "seats": {"run": partners.seating.labels(True), "partner": partners.seating.labels(False)},
        "rows": "run i in its seats (run), beside run j in the others (partner): cell [i][j]",
        "episodes": episodes,
        "checkpoint": checkpoint,
        "matrix": matrix,
        "cells": cells,
        **self_cross_gap(matrix),
        "interval": INTERVAL,
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / CROSSPLAY_JSON).write_text(json.dumps(result, indent=2) + "\n")
    result["files"] = [str(out / CROSSPLAY_JSON), *map(str, plot_crossplay(result, out / "crossplay"))]
    return result


def _score(name: str, d: dict[str, Any]) -> str:
    ci = f" [{d['ci95'][0]:.3g}, {d['ci95'][1]:.3g}]" if d.get("ci95") else ""
    return f"{name} {d['mean']:.3g}{ci}"


def plot_crossplay(result: dict[str, Any], stem: Path) -> list[Path]:
    """The matrix as a heat map (the diagonal outlined), the three scores in its title: ``stem``.png and .svg."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    m = np.asarray(result["matrix"], dtype=float)
    n, labels = len(m), result["labels"]
    fig, ax = plt.subplots(figsize=(max(6.0, 2.6 + 0.8 * n), max(4.5, 2.4 + 0.65 * n)))
    image = ax.imshow(m, cmap="viridis")
    ax.set_xticks(range(n), labels, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(n), labels, fontsize=7)
    ax.set_xlabel(f"partner, in {', '.join(result['seats']['partner'])}", fontsize=8)
    ax.set_ylabel(f"run, in {', '.join(result['seats']['run'])}", fontsize=8)
    middle = (np.nanmax(m) + np.nanmin(m)) / 2
    for i in range(n):
        ax.add_patch(Rectangle((i - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
        for j in range(n):
            color = "black" if m[i, j] > middle else "white"
            ax.text(j, i, f"{m[i, j]:.3g}", ha="center", va="center", fontsize=7, color=color)
    scores = [_score("self-play", result["self_play"]), _score("cross-play", result["cross_play"])]
    ax.set_title(
        f"team return, {result['episodes']} episodes a pair (outlined: self-play)\n{'   '.join(scores)}\n"
        f"{_score('gap (self - cross)', result['gap'])}",
        fontsize=8,
    )
    fig.colorbar(image, ax=ax, fraction=0.046).ax.tick_params(labelsize=7)
    fig.tight_layout()
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    for path in paths:
        fig.savefig(path, dpi=110)
    plt.close(fig)
    return paths
