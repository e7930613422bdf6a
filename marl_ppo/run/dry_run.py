"""``marl-ppo train --dry-run``: builds the env, the groups, the reward table and the networks, and says
what each group reads and what each network makes of it; trains nothing, writes nothing.

Per group: its parameter counts, its observation entries (shape per step, the agents first, and dtype),
and for its actor and its critic the model kinds in order with each trunk's output width (a ``cnn``'s
conv sizes layer by layer, from :mod:`~marl_ppo.models.image_checks`). The widths are read from the
config and the specs, as the trunks compute them, rather than by running the networks: a model too
large to run is what a dry run is for.

>>> from marl_ppo.config import load_config
>>> cfg = load_config(overrides=["env.num_envs=2", "env.kwargs.n_agents=2", "model.hidden=[8]", "model.kind=gru"])
>>> _ = dry_run(cfg)  # doctest: +ELLIPSIS
reward table ...
group agents: 2 agent(s), actor ... parameters, critic ... parameters
  observation agents/observation: [2, 18] float32
  actor: gru -> 128 wide
  critic (centralised): gru -> 128 wide
all groups: ... trainable parameters (shared modules counted once)
"""

from __future__ import annotations

from collections.abc import Iterator

from marl_ppo.algorithms import algorithm
from marl_ppo.config import Config
from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.image_checks import ConvPlan, image_plans
from marl_ppo.models.options import ModelConfig
from marl_ppo.models.registry import kinds_of
from marl_ppo.run.build import Parts, build
from marl_ppo.run.payoff import check_payoff

__all__ = ["dry_run", "group_lines"]

BUILT_IN = ("mlp", "gru", "lstm", "cnn", "deepsets", "gnn")  # the kinds whose output width is known here


def dry_run(cfg: Config) -> int:
    """Builds the run's parts (every check ``train`` makes before a run directory), prints the reward table
    and :func:`group_lines`; returns the exit code."""
    cfg.check_machine()
    parts = build(cfg)
    try:
        check_payoff(cfg, parts)  # and those it runs on the built parts
        print(parts.reward_table)
        for line in group_lines(cfg, parts):
            print(line)
        total = sum(p.numel() for p in parts.router.parameters())
        print(f"all groups: {total:,} trainable parameters (shared modules counted once)")
    finally:
        parts.env.close()
    return 0


def group_lines(cfg: Config, parts: Parts) -> Iterator[str]:
    """Each group's lines: parameters (or its opponent source), observation entries, networks."""
    plans = image_plans({g: parts.groups[g] for g in parts.router.losses}, cfg.model)  # the groups it builds
    for group, loss in parts.router.losses.items():
        actor, critic = (sum(p.numel() for p in m.parameters()) for m in (loss.actor_network, loss.critic_network))
        agents = parts.groups[group].n_agents
        yield f"group {group}: {agents} agent(s), actor {actor:,} parameters, critic {critic:,} parameters"
        yield from _observation_lines(parts.groups[group])
        yield from _network_lines(cfg, group, plans.get(group))
    for group, source in cfg.opponents.items():
        yield f"group {group}: opponents.{group} = {source}"
        yield from _observation_lines(parts.groups[group])


def _observation_lines(spec: GroupSpec) -> Iterator[str]:
    for key in spec.observation_keys:
        entry = spec.inputs[key]
        yield f"  observation {'/'.join(key)}: {list(entry.shape)} {str(entry.dtype).removeprefix('torch.')}"


def _network_lines(cfg: Config, group: str, plan: ConvPlan | None) -> Iterator[str]:
    """The actor's and the critic's kinds in order, each with its output width."""
    m = cfg.model.for_group(group)
    yield f"  actor: {_trunks(m, m.kind, plan)}"
    if cfg.model.critic == "global":
        yield "  critic: global (torchrl's CrossGroupCritic, one MLP for every group, on every group's observations)"
    elif m.critic_inputs != "observation":
        yield f"  critic: an MLP {list(m.hidden)} on the env's state (model.critic_inputs={m.critic_inputs}), no trunk"
    else:
        how = "centralised" if algorithm(cfg.loss.algorithm).centralised else "decentralised"
        yield f"  critic ({how}): {_trunks(m, m.group_critic_kind, plan)}"


def _trunks(m: ModelConfig, kind, plan: ConvPlan | None) -> str:
    """``cnn [conv sizes] -> 64 wide, gru -> 128 wide``; a plain ``mlp`` has no trunk."""
    kinds = kinds_of(kind)
    if kinds == ["mlp"]:
        return f"mlp, no trunk (its MLP {list(m.hidden)} reads the observations)"
    stages = []
    for i, k in enumerate(kinds):
        options = m.kind_options(k) if k in BUILT_IN else {}
        width = options.get("rnn_hidden", m.hidden[-1]) if k in BUILT_IN else "?"
        conv = f" [{plan.line()}]" if k == "cnn" and i == 0 and plan is not None else ""
        stages.append(f"{k}{conv} -> {width} wide")
    return ", ".join(stages)
