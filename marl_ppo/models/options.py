"""The model layer's options: policy and critic networks, per run and per group.

:class:`ModelConfig` is the ``model`` section of a run's :class:`~marl_ppo.config.Config` and what
:func:`~marl_ppo.models.build_models` takes; the kinds it accepts are the registry's
(:mod:`~marl_ppo.models.registry`).

>>> ModelConfig(kind="gru", groups={"adversary": {"kind": "mlp"}}).for_group("adversary").kind
'mlp'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from marl_ppo.models.registry import MODEL_KINDS, is_recurrent, kinds_of
from marl_ppo.options import ConfigError, at_least, choice

__all__ = ["ModelConfig"]


@dataclass
class ModelConfig:
    """Policy and critic networks (see ``docs/models.md``).

    Attributes:
        kind: ``mlp``, ``gru``, ``lstm``, ``cnn``, ``deepsets``, ``gnn``, a kind registered with
            :func:`~marl_ppo.models.registry.register_model_kind`, or a chain of kinds such as
            ``[cnn, gru]`` (each kind reads the output of the one before it). A recurrent policy runs
            an MLP over each agent's observation, then a GRU/LSTM cell (one hidden state per agent, reset at episode
            starts), then the action heads; the PPO update replays ``seq_len``-step chunks from
            the hidden states stored at collection.
        hidden: hidden layer sizes of every MLP (a recurrent model's MLP before its cell).
        activation: ``tanh``, ``relu``, ``elu``, ``gelu`` or ``silu``.
        share_params: one set of weights for all agents of a group (policy and critic).
        agent_id: each agent's one-hot index within its group is read beside its input, by the policy and a
            group critic (EPyMARL's ``obs_agent_id``, Papoudakis et al. 2021): shared weights can then tell
            the agents apart. Any model kind: a plain MLP reads it in its first layer, a trunk's output layer
            (the heads', the value's) beside the trunk's features; exports carry it. Unshared weights
            (``share_params: false``) are each agent's own already and read none.
        rnn_hidden: hidden state size of the GRU/LSTM cell.
        seq_len: steps per chunk in the update of a recurrent model (gradients flow through time
            inside a chunk); must divide the steps each env takes per batch.
        critic: ``group`` (each group's critic sees its own group: MAPPO's centralised or IPPO's
            per-agent critic) or ``global`` (one critic, shared by the groups, sees the
            observations of every group: torchrl's ``CrossGroupCritic``; MAPPO only).
        critic_inputs: what a group critic reads: ``observation`` (the group's observations: all of
            them for MAPPO's centralised critic, each agent's own for IPPO), ``state`` (the env's global
            state, ``env.state=true``: each agent's value from the state, HARL's ``EP``) or
            ``state_and_observation`` (the state and the agent's own observation: HARL's ``FP``). The
            policies read their observations either way. A state critic is an MLP.
        critic_kind: the critics' kind if it differs from ``kind`` (e.g. a GRU policy with an MLP
            critic); a ``global`` critic is an MLP.
        options: each model kind's own options, ``{kind: {option: value}}``, over the defaults of its
            registry line (:mod:`~marl_ppo.models.registry`); ``rnn_hidden`` above is the ``gru``/``lstm``
            option of that name.
        groups: per-group overrides of ``kind``, ``critic_kind``, ``hidden``, ``activation``,
            ``share_params``, ``agent_id``, ``rnn_hidden`` and ``options``, e.g. ``{adversary: {kind: gru}}``.
        max_params: a model (every group's actor and critic) holding more trainable parameters than this
            is warned about when it is built, with the option that shrinks it (a conv stack on a large image
            with strides of 1 feeds its MLP millions of features); 0: no warning. An image model is counted
            from its spec, before its weights are allocated.
    """

    kind: Any = "mlp"
    hidden: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "tanh"
    share_params: bool = True
    agent_id: bool = False
    rnn_hidden: int = 128
    seq_len: int = 10
    critic: str = "group"
    critic_inputs: str = "observation"
    critic_kind: Optional[Any] = None
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_params: int = 20_000_000

    OVERRIDABLE = ("kind", "critic_kind", "hidden", "activation", "share_params", "agent_id", "rnn_hidden", "options")

    def __post_init__(self) -> None:
        _check_model_options("model", self.kind, self.critic_kind, list(self.hidden), self.activation, self.rnn_hidden)
        _check_kind_options("model.options", self.options)
        choice("model.critic", self.critic, ("group", "global"))
        choice("model.critic_inputs", self.critic_inputs, ("observation", "state", "state_and_observation"))
        if self.critic_inputs != "observation" and self.critic == "global":
            raise ConfigError(
                f"model.critic_inputs={self.critic_inputs} is read by a group critic; model.critic=global reads "
                "every group's observations (use model.critic=group)"
            )
        if self.critic == "global" and self.agent_id:
            raise ConfigError(
                "model.agent_id=true: the global critic (torchrl's CrossGroupCritic, model.critic=global) reads no "
                "agent id; use model.critic=group"
            )
        at_least("model.seq_len", self.seq_len, 1)
        at_least("model.max_params", self.max_params, 0, " (0: no warning)")
        if self.critic == "global" and self.critic_kind not in (None, "mlp", ["mlp"]):
            raise ConfigError(
                f"model.critic_kind={self.critic_kind!r} with model.critic=global: the global critic "
                "is an MLP (torchrl's CrossGroupCritic); use model.critic_kind=mlp or model.critic=group"
            )
        for group, override in self.groups.items():
            if not isinstance(override, dict):
                raise ConfigError(
                    f"model.groups.{group} must be a mapping of overrides such as {{kind: gru}}, got {override!r}"
                )
            unknown = sorted(set(override) - set(self.OVERRIDABLE))
            if unknown:
                raise ConfigError(
                    f"model.groups.{group}: unknown key(s) {unknown}; a group may override {list(self.OVERRIDABLE)}"
                )
            merged = {k: override.get(k, getattr(self, k)) for k in self.OVERRIDABLE}
            _check_model_options(
                f"model.groups.{group}",
                merged["kind"],
                merged["critic_kind"],
                list(merged["hidden"]),
                merged["activation"],
                merged["rnn_hidden"],
            )
            _check_kind_options(f"model.groups.{group}.options", merged["options"])
        for group in ["", *self.groups]:  # the run's options, then each group's over them
            _check_gnn_radius(self, group)

    def for_group(self, group: str) -> "ModelConfig":
        """This config with ``groups[group]``'s overrides applied (and no per-group table)."""
        override = dict(self.groups.get(group, {}))
        if "hidden" in override:
            override["hidden"] = list(override["hidden"])
        if "options" in override:  # per kind, the group's options over the run's
            given = override["options"]
            override["options"] = {k: {**self.options.get(k, {}), **given.get(k, {})} for k in {*self.options, *given}}
        return dataclasses.replace(self, groups={}, **override)

    def options_by_kind(self, kind: str | list[str]) -> dict[str, dict[str, Any]]:
        """:meth:`kind_options` of each kind of ``kind`` (one kind or a chain), by kind."""
        return {k: self.kind_options(k) for k in kinds_of(kind)}

    def kind_options(self, kind: str) -> dict[str, Any]:
        """The options model kind ``kind`` is built with: its registry defaults, ``rnn_hidden`` for a kind
        that has that option, then ``options[kind]``."""
        options = dict(MODEL_KINDS[kind].options)
        if "rnn_hidden" in options:
            options["rnn_hidden"] = self.rnn_hidden
        return {**options, **self.options.get(kind, {})}

    def state_critic_refusal(self, env_state: bool, env_kind: str, name: str, entry: Any) -> str | None:
        """Why the critics cannot read the env's global state (``critic_inputs``), or ``None``: the env
        must give it (``env_state``), the algorithm (``name``, its table ``entry``) have a centralised
        critic, and every group critic be an MLP."""
        if self.critic_inputs == "observation":
            return None
        if not env_state:
            return f"reads the env's global state: set env.state=true (env.kind={env_kind!r})"
        if not entry.centralised:
            return (
                f"loss.algorithm={name!r} has a decentralised critic (each agent's own observation); use mappo or happo"
            )
        kinds = [self.for_group(g).group_critic_kind for g in ["", *self.groups]]
        other = [k for k in kinds if k not in ("mlp", ["mlp"])]
        return (
            f"the state critic is an MLP, but a group critic is {other[0]!r}; set model.critic_kind=mlp"
            if other
            else None
        )

    @property
    def group_critic_kind(self) -> str:
        """The kind of a group critic (``critic_kind``, else ``kind``)."""
        return self.critic_kind or self.kind

    @property
    def recurrent(self) -> bool:
        """Whether any network of any group keeps a hidden state (a recurrent kind, see the registry)."""
        kinds = [self.kind, self.group_critic_kind]
        kinds += [k for g in self.groups for k in (self.for_group(g).kind, self.for_group(g).group_critic_kind)]
        return any(is_recurrent(k) for k in kinds)


def _check_kind(where: str, kind: Any) -> None:
    """One registered kind, or a chain of distinct ones (``[cnn, gru]``)."""
    if isinstance(kind, str):
        choice(where, kind, tuple(MODEL_KINDS.names()))
        return
    if not isinstance(kind, (list, tuple)) or not kind or not all(isinstance(k, str) for k in kind):
        raise ConfigError(f"{where} must be a model kind or a list of them (a chain, e.g. [cnn, gru]), got {kind!r}")
    for k in kind:
        choice(f"{where} (chain {list(kind)})", k, tuple(MODEL_KINDS.names()))
    if len(set(kind)) != len(kind):
        raise ConfigError(f"{where}: a chain holds each kind once, got {list(kind)}")


def _check_kind_options(where: str, options: Any) -> None:
    """``{kind: {option: value}}``: registered kinds, each option one of the kind's, of its default's type."""
    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        raise ConfigError(
            f"{where} must map a model kind to its options, e.g. {{gru: {{rnn_hidden: 64}}}}; got {options!r}"
        )
    for kind, given in options.items():
        choice(f"{where} key", kind, tuple(MODEL_KINDS.names()))
        defaults = MODEL_KINDS[kind].options
        for name, value in given.items():
            if name not in defaults:
                raise ConfigError(
                    f"{where}.{kind}: unknown option {name!r}; model kind {kind!r} takes {sorted(defaults)}"
                )
            default = defaults[name]
            if not _same_type(value, default):
                raise ConfigError(
                    f"{where}.{kind}.{name} must be of the type of its default {default!r} "
                    f"({type(default).__name__}), got {value!r}"
                )


def _check_gnn_radius(model: ModelConfig, group: str) -> None:
    """Refuses a ``gnn`` radius given under ``topology: full``, where every agent hears every other and no
    radius is read (it would be ignored without a word)."""
    run = model.options.get("gnn", {})
    own = model.groups.get(group, {}).get("options", {}).get("gnn", {}) if group else {}
    given = {**run, **own}
    if "radius" not in given or {**MODEL_KINDS["gnn"].options, **given}["topology"] != "full":
        return
    where = f"model.groups.{group}.options.gnn" if {"radius", "topology"} & set(own) else "model.options.gnn"
    raise ConfigError(
        f"{where}.radius={given['radius']!r} with topology=full: every agent hears every other, no radius is "
        f"read; for edges between agents within the radius set {where}.topology=from_pos (and its position "
        f"slice), or leave the radius out"
    )


def _same_type(value: Any, default: Any) -> bool:
    """Whether ``value`` may stand for ``default`` (an int for a float, a list for a tuple; any value for ``None``)."""
    if default is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))


def _check_model_options(
    where: str, kind: str, critic_kind: str | None, hidden: list, activation: str, rnn_hidden: int
) -> None:
    _check_kind(f"{where}.kind", kind)
    if critic_kind is not None:
        _check_kind(f"{where}.critic_kind", critic_kind)
    choice(f"{where}.activation", activation, ("tanh", "relu", "elu", "gelu", "silu"))
    if not hidden or any(not isinstance(h, int) or isinstance(h, bool) or h < 1 for h in hidden):
        raise ConfigError(f"{where}.hidden must list one or more layer sizes >= 1 (e.g. [256, 256]), got {hidden}")
    if not isinstance(rnn_hidden, int) or rnn_hidden < 1:
        raise ConfigError(f"{where}.rnn_hidden must be an integer >= 1, got {rnn_hidden!r}")
