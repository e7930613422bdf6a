"""A ``tanh`` activation that stays fast under ``torch.compile`` on CPU.

Inductor generates its own vectorised ``tanh`` kernel, which on CPU runs about 5x slower than
ATen's (``[1200, 256]`` float32, one thread: about 600-850 us against 110-150 us). The policy and
critic MLPs apply ``tanh`` twice per call, which made a compiled update barely faster than the
eager one. :class:`Tanh` hides ATen's kernel behind a custom op while being compiled, so inductor
calls it instead of generating one (the backward, ``grad * (1 - y^2)``, is still fused by
inductor); outside compilation it is plain ``torch.tanh``. Same values, same gradients, and no
parameters: models and checkpoints are those of ``nn.Tanh``.

Written by hand: torch offers no per-op switch to keep ATen's kernel inside a compiled graph.

>>> import torch
>>> x = torch.randn(4, 3)
>>> torch.equal(Tanh()(x), torch.tanh(x)), torch.equal(aten_tanh(x), torch.tanh(x))
(True, True)
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Tanh", "aten_tanh"]


@torch.library.custom_op("marl_ppo::tanh", mutates_args=())
def aten_tanh(x: torch.Tensor) -> torch.Tensor:
    """``torch.tanh`` as an opaque op: a compiled graph calls ATen's kernel for it."""
    return torch.tanh(x)


@aten_tanh.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(output)


def _backward(ctx, grad: torch.Tensor) -> torch.Tensor:
    (y,) = ctx.saved_tensors
    return grad * (1 - y * y)


aten_tanh.register_autograd(_backward, setup_context=_setup_context)


@aten_tanh.register_vmap
def _(info, in_dims, x):  # elementwise: the batched tensor goes through as it is
    return aten_tanh(x), in_dims[0]


class Tanh(nn.Tanh):
    """``nn.Tanh`` that keeps ATen's kernel inside ``torch.compile`` (see the module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling() and not torch.compiler.is_exporting():  # an export keeps torch.tanh
            return aten_tanh(x)
        return torch.tanh(x)
