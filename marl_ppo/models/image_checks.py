"""The ``cnn`` kind checked from the spec, before any network is built: the conv stack's sizes layer by
layer, a stack too deep for a group's view refused, and a model larger than ``model.max_params`` warned.

torch's own error for a stack too deep for the image ("Kernel size can't be greater than actual input
size") names no group, option or size; and a conv stack with strides of 1 on a large image gives a first
MLP layer of hundreds of millions of weights, allocated without a word. Both are arithmetic on the spec:
a conv layer of kernel ``k``, stride ``s`` and padding ``p`` maps a side ``n`` to ``(n + 2p - k) // s + 1``
and needs ``n + 2p >= k``.

>>> plan = ConvPlan("red", ("red", "observation"), (5, 13, 13), channels=[8, 8], kernels=[5, 5], strides=[1, 2],
...                 paddings=[0, 0], option="model.options.cnn")
>>> plan.sizes, plan.features, plan.params
([(8, 9, 9), (8, 3, 3)], 72, 2616)
>>> plan.line()
'red/observation 5x13x13 -> 8x9x9 -> 8x3x3: 72 features'
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.cnn import channels_last
from marl_ppo.models.options import ModelConfig
from marl_ppo.models.registry import kinds_of
from marl_ppo.options import ConfigError

__all__ = ["ConvPlan", "image_plans", "check_images", "check_param_count", "count_parameters"]


@dataclass(frozen=True)
class ConvPlan:
    """One group's conv stack on its image entry ``key`` of per-agent shape ``image`` ``(C, H, W)``:
    the layers' options and the ``option`` (its config key) that sets them."""

    group: str
    key: tuple
    image: tuple[int, int, int]
    channels: Sequence[int]
    kernels: Sequence[int]
    strides: Sequence[int]
    paddings: Sequence[int]
    option: str
    alone: str = ""  # where the option is the run's: the group's own key, set for this group alone
    vectors: int = 0  # the width of the group's vector entries, joined after the conv features
    sizes: list[tuple[int, int, int]] = field(init=False)

    def __post_init__(self) -> None:
        sizes, (_, h, w) = [], self.image
        for c, k, s, p in zip(self.channels, self.kernels, self.strides, self.paddings):
            if min(h, w) + 2 * p < k:  # torch refuses this layer: stop the sizes at the last that fits
                break
            h, w = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
            sizes.append((c, h, w))
        object.__setattr__(self, "sizes", sizes)

    @property
    def too_deep(self) -> bool:
        """Whether a layer gets an input smaller than its kernel (its padding included)."""
        return len(self.sizes) < len(self.channels)

    @property
    def features(self) -> int:
        """The flattened width of the last conv layer's output, per agent."""
        c, h, w = self.sizes[-1] if self.sizes else self.image
        return c * h * w

    @property
    def params(self) -> int:
        """The weights and biases of one conv stack."""
        ins = [self.image[0], *self.channels[:-1]]
        return sum(k * k * i * c + c for i, c, k in zip(ins, self.channels, self.kernels))

    def line(self) -> str:
        """The sizes layer by layer, e.g. ``red/observation 5x13x13 -> 8x9x9 -> 8x3x3: 72 features``."""
        sides = " -> ".join("x".join(map(str, s)) for s in [self.image, *self.sizes])
        return f"{'/'.join(self.key)} {sides}: {self.features:,} features"

    def refusal(self) -> str:
        """The one-line error of a stack too deep for the image (see :func:`check_images`)."""
        i = len(self.sizes)
        _, h, w = self.sizes[-1] if self.sizes else self.image
        sides = " -> ".join(f"{s[1]}x{s[2]}" for s in [self.image, *self.sizes])
        return (
            f"group {self.group!r}: its image {'/'.join(self.key)} is {self.image[1]}x{self.image[2]} "
            f"({self.image[0]} channels), too small for the conv stack of {self.option}: layer {i + 1} of "
            f"{len(self.channels)} (kernel {self.kernels[i]}, stride {self.strides[i]}, padding {self.paddings[i]}) "
            f"gets {h}x{w} ({sides}); use fewer layers, smaller kernels or strides, or paddings in {self.option}"
            + (f" (or {self.alone} for this group alone)" if self.alone else "")
        )


def _option(model: ModelConfig, group: str, n_groups: int) -> tuple[str, str]:
    """The config key of a group's conv options: its own override if it has one, else the run's, with the
    group's own key beside it where the run has several groups."""
    own = f"model.groups.{group}.options.cnn"
    if "cnn" in model.groups.get(group, {}).get("options", {}):
        return own, ""
    return "model.options.cnn", own if n_groups > 1 else ""


def _roles(model: ModelConfig, m: ModelConfig) -> list[str]:
    """The networks of a group that start with a ``cnn`` trunk: ``actor``, ``critic``."""
    roles = ["actor"] if kinds_of(m.kind)[0] == "cnn" else []
    group_critic = model.critic == "group" and m.critic_inputs == "observation"
    return roles + (["critic"] if group_critic and kinds_of(m.group_critic_kind)[0] == "cnn" else [])


def image_plans(
    groups: Mapping[str, GroupSpec], model: ModelConfig, shared: Mapping[str, str] | None = None
) -> dict[str, ConvPlan]:
    """``{group: plan}`` for every group whose actor or critic starts with a ``cnn`` trunk, read from its
    spec. A group the ``cnn`` trunk refuses anyway (no single image entry, options of unequal lengths) has
    no plan: the trunk's own error names it."""
    plans, shared = {}, dict(shared or {})
    for g, spec in groups.items():
        m = model.for_group(shared.get(g, g))
        if not _roles(model, m):
            continue
        o = m.kind_options("cnn")
        shapes = {key: tuple(spec.inputs[key].shape[1:]) for key in spec.observation_keys}
        images = [k for k, s in shapes.items() if len(s) == 3]
        layers = [o["channels"], o["kernels"], o["strides"], o["paddings"]]
        if len(images) != 1 or len({len(v) for v in layers}) != 1:
            continue
        shape = shapes[images[0]]
        last = channels_last(g, images[0], shape, o["channel_order"])
        image = (shape[2], shape[0], shape[1]) if last else shape
        vectors = sum(s[0] for s in shapes.values() if len(s) == 1)
        plans[g] = ConvPlan(
            g, images[0], image, *layers, *_option(model, shared.get(g, g), len(groups)), vectors=vectors
        )
    return plans


def check_images(
    groups: Mapping[str, GroupSpec],
    model: ModelConfig,
    *,
    centralized: bool,
    shared: Mapping[str, str] | None = None,
) -> bool:
    """Refuses a conv stack too deep for a group's image (a ConfigError naming the group, its image size,
    the layer and the option), and warns where the conv stacks and the first layer after them hold more
    than ``model.max_params`` weights. Returns whether it warned. Runs on the specs alone, before any
    network is built (the warning comes before the allocation it is about)."""
    shared = dict(shared or {})
    plans = image_plans(groups, model, shared)
    for plan in plans.values():
        if plan.too_deep:
            raise ConfigError(plan.refusal())
    counts = {g: _weights(plan, groups[g].n_agents, model, centralized) for g, plan in plans.items() if g not in shared}
    total = sum(counts.values())
    if not 0 < model.max_params < total:
        return False
    g = max(counts, key=counts.get)
    plan = plans[g]
    warnings.warn(
        f"the model holds at least {total:,} parameters, over model.max_params={model.max_params:,}; most in group "
        f"{g!r}, whose conv stack gives {plan.features:,} features per agent ({plan.line()}), each weighted by "
        f"every unit of the first layer after it (model.hidden[0]={model.for_group(g).hidden[0]}): larger strides "
        f"in {plan.option}.strides (now {list(plan.strides)}), fewer channels or a smaller image shrink it "
        f"(model.max_params=0: no warning)",
        UserWarning,
        stacklevel=2,
    )
    return True


def _weights(plan: ConvPlan, n_agents: int, model: ModelConfig, centralized: bool) -> int:
    """The weights of a group's conv stacks and of the first layer after each (the dominant part of an image
    model: every conv feature times every unit of ``model.hidden[0]``), in its actor and critic."""
    m = model.for_group(plan.group)
    copies, width, n_in = 1 if m.share_params else n_agents, m.hidden[0], plan.features + plan.vectors
    first = {"actor": n_in, "critic": n_in * (n_agents if centralized else 1)}  # a centralised critic reads all
    return sum(copies * (plan.params + first[role] * width + width) for role in _roles(model, m))


def count_parameters(*modules) -> int:
    """The trainable parameters of ``modules``, each tensor once however many modules hold it."""
    seen = {id(p): p for module in modules for p in module.parameters() if p.requires_grad}
    return sum(p.numel() for p in seen.values())


def check_param_count(total: int, model: ModelConfig) -> None:
    """Warns when the built models hold more than ``model.max_params`` parameters, with what shrinks them."""
    if not 0 < model.max_params < total:
        return
    unshared = [g for g in ["", *model.groups] if not model.for_group(g).share_params]
    also = " or model.share_params=true (one network for a group's agents)" if unshared else ""
    warnings.warn(
        f"the model holds {total:,} trainable parameters, over model.max_params={model.max_params:,}; a smaller "
        f"model.hidden (now {list(model.hidden)}){also} shrinks it (model.max_params=0: no warning)",
        UserWarning,
        stacklevel=2,
    )
