"""Draws the documentation's charts from the result files in ``docs/charts/data/``.

    python docs/charts/make_charts.py            # writes docs/charts/<name>.svg for every chart
    python docs/charts/make_charts.py --out DIR  # somewhere else (the docs test does this)

Each chart is one function of its data file (``CHARTS`` below); every data file says in its header
which benchmark command measured its numbers, and the page that shows the chart states them as a
table too, so a chart can be checked and redrawn without rerunning anything. The SVGs keep their text
as text (``svg.fonttype: none``) and carry no date, so a redraw of unchanged data changes no byte.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
BLUE, ORANGE, GREY, GREEN = "#1f77b4", "#ff7f0e", "#7f7f7f", "#2ca02c"
STYLE = {
    "svg.fonttype": "none",
    "svg.hashsalt": "marl_ppo",
    "font.size": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
}


def read(name: str) -> list[dict[str, str]]:
    """The rows of ``data/<name>``, skipping its ``#`` header lines."""
    lines = [ln for ln in (DATA / name).read_text().splitlines() if ln and not ln.startswith("#")]
    return list(csv.DictReader(lines))


def seeds() -> plt.Figure:
    rows = read("seeds.csv")
    s = [int(r["seeds"]) for r in rows]
    fig, (time_ax, rss_ax) = plt.subplots(1, 2, figsize=(9, 3.4))
    for key, label, color in [
        ("one_process_s", "one process (train.seeds)", BLUE),
        ("one_after_another_s", "S runs one after another", ORANGE),
        ("side_by_side_s", "S runs side by side (2 cores)", GREY),
    ]:
        time_ax.plot(s, [float(r[key]) for r in rows], "o-", color=color, label=label)
    time_ax.set(xscale="log", xlabel="seeds S", ylabel="wall time, s", title="Time for S seeds of 30 000 frames")
    for key, label, color in [
        ("peak_rss_one_process_mib", "one process", BLUE),
        ("peak_rss_s_processes_mib", "S processes (sum of peaks)", GREY),
    ]:
        rss_ax.plot(s, [float(r[key]) for r in rows], "o-", color=color, label=label)
    rss_ax.set(xscale="log", xlabel="seeds S", ylabel="peak RSS, MiB", title="Memory")
    for ax in (time_ax, rss_ax):
        ax.set_xticks(s, [str(v) for v in s])
        ax.minorticks_off()
        ax.legend(frameon=False, fontsize=8)
    return fig


def _dots(rows: list[dict[str, str]], title: str, ylabel: str, suptitle: str) -> plt.Figure:
    """One panel per ``task``: each ``side``'s seeds as dots, their mean as a bar (``{task}`` in ``title`` and
    ``ylabel`` stands for the panel's)."""
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 3.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        sides = list(dict.fromkeys(r["side"] for r in rows if r["task"] == task))
        for i, side in enumerate(sides):
            values = [float(r["final_return"]) for r in rows if r["task"] == task and r["side"] == side]
            offsets = [i + 0.06 * (j - (len(values) - 1) / 2) for j in range(len(values))]
            color = (BLUE, ORANGE, GREY)[i % 3]
            ax.plot(offsets, values, "o", color=color, alpha=0.8)
            ax.hlines(sum(values) / len(values), i - 0.25, i + 0.25, color=color, linewidth=2)
        ax.set_xticks(range(len(sides)), sides)
        ax.set_xlim(-0.6, len(sides) - 0.4)
        ax.set(title=title.format(task=task), ylabel=ylabel.format(task=task))
    fig.suptitle(suptitle, fontsize=10)
    return fig


def tuned() -> plt.Figure:
    return _dots(
        read("tuned.csv"), "VMAS {task}", "final training return", "Each seed a dot, the mean a bar (120 000 frames)"
    )


def happo_halfcheetah() -> plt.Figure:
    suptitle = "MaMuJoCo HalfCheetah 2x3: each seed a dot, the mean a bar (200 000 frames)"
    return _dots(read("happo_halfcheetah.csv"), "{task}", "{task}", suptitle)


def tictactoe() -> plt.Figure:
    rows = read("tictactoe.csv")
    frames = [int(r["frames"]) / 1000 for r in rows]
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for seat, color in [("first", BLUE), ("second", ORANGE)]:
        ax.plot(frames, [float(r[f"{seat}_win"]) for r in rows], "o-", color=color, label=f"win, {seat} seat")
        ax.plot(frames, [float(r[f"{seat}_loss"]) for r in rows], "s--", color=color, label=f"loss, {seat} seat")
    # what a uniformly random player wins against another, in each seat (the game's known 58.5 % and 28.8 %)
    for rate, seat in [(0.585, "first"), (0.288, "second")]:
        ax.axhline(rate, color=GREY, linestyle=":", linewidth=1)
        ax.annotate(
            f"a random player's wins, {seat} seat", (frames[-1], rate), ha="right", va="bottom", fontsize=7, color=GREY
        )
    ax.set(xlabel="frames (thousands)", ylabel="rate over evaluation games", ylim=(-0.02, 1.02))
    ax.set_title("Tic-tac-toe against a uniformly random player")
    ax.legend(frameon=False, fontsize=8, ncol=2)
    return fig


def pistonball() -> plt.Figure:
    rows = read("pistonball.csv")
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for seed, color in zip(sorted({r["seed"] for r in rows}), [BLUE, ORANGE, GREEN, GREY]):
        own = [r for r in rows if r["seed"] == seed]
        ax.plot([int(r["frames"]) / 1000 for r in own], [float(r["train_return"]) for r in own], color=color,
                label=f"seed {seed}")  # fmt: skip
    ax.axhline(100, color=GREY, linestyle=":", linewidth=1)
    ax.annotate("100: the ball carried to the left wall", (0, 100), va="bottom", fontsize=7, color=GREY)
    ax.set(xlabel="frames (thousands)", ylabel="training return (mean over a batch)")
    ax.set_title("Pistonball, 5 pistons, IPPO: the pistons see their frames")
    ax.legend(frameon=False, fontsize=8)
    return fig


def paper_tasks() -> plt.Figure:
    rows = read("paper_tasks.csv")
    # EPyMARL's published MAPPO (Table 6: the average over training, parameter sharing), where it reports the task
    published = {r["task"]: r for r in read("epymarl_published.csv") if r["table"] == "6"}
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(2.3 * len(tasks), 3.2))
    for ax, task in zip(axes, tasks):
        own = [r for r in rows if r["task"] == task]
        for x, key, color, label in ((0, "train_team_return_last10pct", BLUE, "training"),
                                     (1, "eval_team_return", ORANGE, "evaluation")):  # fmt: skip
            values = [float(r[key]) for r in own if r[key] != ""]
            ax.scatter([x] * len(values), values, color=color, s=18, label=label)
            if values:
                ax.hlines(sum(values) / len(values), x - 0.25, x + 0.25, color=color)
        if task in published:
            mean, steps = float(published[task]["mean"]), int(published[task]["budget_steps"]) // 10**6
            ax.axhline(mean, color=GREY, linestyle="--", linewidth=1)
            ax.annotate(f"EPyMARL {mean:g}, {steps}M steps", (-0.55, mean), va="bottom", fontsize=7, color=GREY)
            ax.set_ylim(0, max(ax.get_ylim()[1], 1.25 * mean))
        ax.set_xticks([0, 1], ["train", "eval"])
        ax.set_xlim(-0.6, 1.6)
        ax.set_title(f"{task}\n{int(own[0]['frames']) // 1000}k frames a seed", fontsize=8)
    axes[0].set_ylabel("team return")
    suptitle = "MAPPO with the shipped configs: team return per seed (line: mean)"
    fig.suptitle(f"{suptitle}\ndashed: EPyMARL MAPPO, average over 20M/40M steps", fontsize=10)
    fig.tight_layout()
    return fig


def crossplay_cramped_room() -> plt.Figure:
    rows = read("crossplay_cramped_room.csv")
    n = max(int(r["row"]) for r in rows) + 1
    matrix = [[0.0] * n for _ in range(n)]
    for r in rows:
        matrix[int(r["row"])][int(r["col"])] = float(r["team_return"])
    fig, ax = plt.subplots(figsize=(4.6, 3.8))
    image = ax.imshow(matrix, cmap="viridis")
    for i in range(n):
        for j in range(n):
            ax.text(j, i, f"{matrix[i][j]:.0f}", ha="center", va="center", fontsize=8,
                    color="black" if matrix[i][j] > 100 else "white")  # fmt: skip
        ax.add_patch(plt.Rectangle((i - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5))
    ax.set_xticks(range(n), [f"seed {j}" for j in range(n)], fontsize=8)
    ax.set_yticks(range(n), [f"seed {i}" for i in range(n)], fontsize=8)
    ax.set(xlabel="partner (agent_1)", ylabel="run (agent_0)")
    ax.grid(False)
    ax.set_title("Overcooked cramped_room: team return (outlined: self-play)", fontsize=9)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return fig


def iteration_floor() -> plt.Figure:
    rows = read("iteration_floor.csv")
    cases = list(dict.fromkeys((r["config"], r["mode"]) for r in rows))
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width, shades = 0.38, {"collection": 1.0, "update": 0.55, "the rest": 0.25}
    for i, case in enumerate(cases):
        parts = {r["part"]: r for r in rows if (r["config"], r["mode"]) == case}
        for side, dx, color in [("ours_s", -width / 2, BLUE), ("floor_s", width / 2, GREY)]:
            values = {p: float(parts[p][side]) for p in ("collection", "update")}
            values["the rest"] = float(parts["whole"][side]) - sum(values.values())  # advantages, logging
            bottom = 0.0
            for part, value in values.items():
                ax.bar(i + dx, value, width, bottom=bottom, color=color, alpha=shades[part], edgecolor="white")
                bottom += value
        top = float(parts["whole"]["ours_s"])
        ax.annotate(f"{float(parts['whole']['ours_over_floor']):.2f}×", (i - width / 2, top), ha="center", va="bottom")
    labels = [f"{c.replace(' (', chr(10) + '(')}\n{m}" for c, m in cases]
    ax.set_xticks(range(len(cases)), labels, fontsize=8)
    ax.set(ylabel="seconds per iteration")
    ax.set_title("One iteration: marl_ppo (blue) against its raw-torch floor (grey)")
    for part, alpha in shades.items():
        ax.bar(0, 0, color=GREY, alpha=alpha, label=part)
    ax.legend(frameon=False, fontsize=8)
    return fig


def collection() -> plt.Figure:
    rows = read("collection.csv")
    names = [f"{r['family']}\n{r['config']}" for r in rows]
    fig, (rate_ax, ratio_ax) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [1.3, 1]})
    lows = [float(r["frames_per_s_low"]) for r in rows]
    highs = [float(r["frames_per_s_high"]) for r in rows]
    y = range(len(rows))
    rate_ax.barh(y, highs, color=BLUE, alpha=0.35)
    rate_ax.barh(y, lows, color=BLUE)
    rate_ax.set_yticks(y, names, fontsize=8)
    rate_ax.invert_yaxis()
    rate_ax.set(xscale="log", xlabel="collected frames/s (one thread)", title="Collection speed per env family")
    measured = [r for r in rows if r["over_env_low"]]
    y2 = range(len(measured))
    ratio_ax.barh(y2, [float(r["over_env_high"]) for r in measured], color=ORANGE, alpha=0.35)  # the range
    ratio_ax.barh(y2, [float(r["over_env_low"]) for r in measured], color=ORANGE)
    ratio_ax.axvline(1.3, color=GREEN, linestyle="--", linewidth=1)
    ratio_ax.annotate(" 1.3×", (1.3, len(measured) - 0.5), color=GREEN, fontsize=8)
    ratio_ax.set_yticks(y2, [r["family"] for r in measured], fontsize=8)
    ratio_ax.invert_yaxis()
    ratio_ax.set(xlabel="collection time / the env's own time", title="Over the env alone (VMAS: its floor)")
    return fig


def data_flow() -> plt.Figure:
    """The five steps of an iteration, each box the entries it writes."""
    steps = [
        (
            "env (VMAS / PettingZoo, via torchrl)",
            '("next", g, "reward"), done per group or at the root   [*B, T, n_agents, 1]',
        ),
        (
            "reward table, bound to the env's specs",
            '("next", g, "train_reward" | "train_done" | "train_terminated"): one row per group',
        ),
        ("per-group advantages (MultiAgentGAE per group)", '(g, "advantage"), (g, "value_target"): never at the root'),
        (
            "per-group losses (one torchrl PPO loss per group)",
            "{g: loss_objective, loss_critic, loss_entropy, per-head diagnostics}",
        ),
        ("one aggregated step", "sum of every group's loss_* → one backward → one clip → one optimizer step"),
    ]
    fig, ax = plt.subplots(figsize=(8, 5.2))
    ax.set(xlim=(0, 10), ylim=(0, 10))
    ax.axis("off")
    height, gap = 1.45, 0.55
    for i, (title, entries) in enumerate(steps):
        top = 10 - i * (height + gap)
        box = FancyBboxPatch(
            (0.3, top - height), 9.4, height - 0.1, boxstyle="round,pad=0.02,rounding_size=0.15", fc="#eef4fb", ec=BLUE
        )
        ax.add_patch(box)
        ax.text(5, top - 0.45, title, ha="center", va="center", fontsize=11, weight="bold")
        ax.text(5, top - 1.0, entries, ha="center", va="center", fontsize=8.5, family="monospace")
        if i:
            ax.add_patch(FancyArrowPatch((5, top + gap - 0.05), (5, top + 0.02), arrowstyle="-|>", mutation_scale=14))
    return fig


# one line a chart: its name (the SVG's), its data file, and the function that draws it
CHARTS: dict[str, tuple[str | None, Callable[[], plt.Figure]]] = {
    "seeds": ("seeds.csv", seeds),
    "tuned": ("tuned.csv", tuned),
    "happo_halfcheetah": ("happo_halfcheetah.csv", happo_halfcheetah),
    "tictactoe": ("tictactoe.csv", tictactoe),
    "pistonball": ("pistonball.csv", pistonball),
    "paper_tasks": ("paper_tasks.csv", paper_tasks),
    "crossplay_cramped_room": ("crossplay_cramped_room.csv", crossplay_cramped_room),
    "iteration_floor": ("iteration_floor.csv", iteration_floor),
    "collection": ("collection.csv", collection),
    "data_flow": (None, data_flow),
}


def draw(out: Path, names: list[str] | None = None) -> list[Path]:
    """Writes each named chart (every chart by default) as ``out/<name>.svg``; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with plt.rc_context(STYLE):
        for name in names or list(CHARTS):
            fig = CHARTS[name][1]()
            fig.tight_layout()
            path = out / f"{name}.svg"
            fig.savefig(path, metadata={"Date": None})
            plt.close(fig)
            written.append(path)
    return written


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=HERE, help="folder for the SVGs (default: docs/charts)")
    p.add_argument("names", nargs="*", help=f"charts to draw (default: all): {', '.join(CHARTS)}")
    args = p.parse_args()
    unknown = [n for n in args.names if n not in CHARTS]
    if unknown:
        p.error(f"unknown chart(s) {', '.join(unknown)}; expected some of: {', '.join(CHARTS)}")
    for path in draw(args.out, args.names or None):
        print(path)


if __name__ == "__main__":
    main()
