"""Every private name of torch, torchrl, tensordict, VMAS and numpy that the package relies on, in one table.

A private name may change in any release of its library. Each row says where it lives, what we do
with it and where; ``tests/test_upstream.py`` checks that every row still holds for the installed
versions (the name exists; a method we override or call keeps the parameters we use) and that the
package touches no private name of another library that is not listed here, so an upgrade fails
in that one place instead of silently in the code. The table imports nothing: it is read by the
test and by whoever upgrades.

Kinds: ``override`` (a method of theirs we override in a subclass), ``call`` (a method or function
of theirs we call), ``read`` (an attribute of theirs we read or set), ``import`` (a private name
we import), ``mirror`` (a method whose behaviour we reproduce step for step elsewhere: a change in
it changes what ours must do), ``hook`` (a private-named extension point their docs tell
subclasses to implement).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PrivateName", "PRIVATE_NAMES"]


class PrivateName(NamedTuple):
    """One private name: ``owner`` (an importable dotted path) holds ``name``; ``params`` are the
    parameters (after ``self``) we rely on, ``None`` where we do not call or override it."""

    owner: str
    name: str
    kind: str
    used_in: str
    params: tuple[str, ...] | None = None


_PPO = (
    "torchrl.objectives.ClipPPOLoss",
    "torchrl.objectives.multiagent.MAPPOLoss",
    "torchrl.objectives.multiagent.IPPOLoss",
)

PRIVATE_NAMES: tuple[PrivateName, ...] = (
    # the PPO losses (core/losses.py: per-head coefficients and diagnostics, value normalisation)
    *(PrivateName(o, "_get_entropy", "override", "core/losses.py", ("dist", "adv_shape")) for o in _PPO),
    *(PrivateName(o, "_log_weight", "override", "core/losses.py", ("tensordict", "adv_shape")) for o in _PPO),
    *(PrivateName(o, "_get_cur_log_prob", "override", "core/losses.py", ("tensordict", "params")) for o in _PPO),
    *(PrivateName(o, "_weighted_loss_entropy", "override", "core/losses.py", ("entropy",)) for o in _PPO),
    *(PrivateName(o, "_loss_mask_keys", "override", "core/losses.py", ()) for o in _PPO),
    *(
        PrivateName(o, "_standardize_advantage", "override", "core/losses.py", ("advantage", "tensordict"))
        for o in _PPO
    ),
    *(
        PrivateName(
            o, "_maybe_normalize_advantage", "override", "core/losses.py", ("advantage", "tensordict", "update_norm")
        )
        for o in _PPO
    ),
    *(
        PrivateName(
            o, "_critic_loss_inputs", "override", "core/losses.py", ("target_return", "state_value", "old_state_value")
        )
        for o in _PPO
    ),
    *(
        PrivateName(
            o, "_reduce_loss", "override", "core/losses.py", ("loss", "tensordict", "mask", "reduction", "weights")
        )
        for o in _PPO
    ),
    PrivateName("torchrl.objectives.ClipPPOLoss", "_clip_bounds", "read", "core/bundles.py, core/group_loss.py"),
    PrivateName("torchrl.objectives.common.LossModule", "_apply", "call", "core/router.py", ("fn",)),
    PrivateName("torch.nn.Module", "_apply", "override", "core/router.py", ("fn", "recurse")),
    # tensordict's module output path (models/modules.py: plain tensors written straight in)
    PrivateName(
        "tensordict.nn.TensorDictModule",
        "_write_to_tensordict",
        "override",
        "models/modules.py",
        ("tensordict", "tensors", "tensordict_out", "out_keys"),
    ),
    # the tanh-normal built without torchrl's host reads (models/distributions.py), read back by the lean collector
    PrivateName(
        "torchrl.modules.distributions.continuous", "_PatchedAffineTransform", "import", "models/distributions.py"
    ),
    PrivateName(
        "torchrl.modules.distributions.continuous", "_PatchedComposeTransform", "import", "models/distributions.py"
    ),
    PrivateName(
        "torchrl.modules.distributions.TanhNormal", "_t", "read", "models/distributions.py, collect/lean_vmas.py"
    ),
    PrivateName(
        "torchrl.modules.distributions.TanhNormal",
        "_event_dims",
        "read",
        "models/distributions.py, collect/lean_vmas.py",
    ),
    PrivateName("torch.distributions.Distribution", "_validate_args", "read", "collect/lean_vmas.py"),
    PrivateName("torchrl.weight_update._ray", "_DIST_TIMEOUT", "read", "collect/collectors.py"),
    PrivateName("tensordict.nn.ProbabilisticTensorDictModule", "_generator", "read", "collect/lean_vmas.py"),
    PrivateName("tensordict.nn.ProbabilisticTensorDictModule", "_generator_key", "read", "collect/lean_vmas.py"),
    # VMAS through torchrl's wrapper
    PrivateName(
        "torchrl.envs.libs.vmas.VmasWrapper",
        "_env",
        "read",
        "envs/vmas.py, envs/comm.py, collect/lean_vmas.py (the simulator)",
    ),
    PrivateName(
        "torchrl.envs.libs.vmas.VmasWrapper", "_step", "mirror", "envs/vmas.py, collect/lean_vmas.py", ("tensordict",)
    ),
    PrivateName(
        "torchrl.envs.libs.vmas.VmasWrapper", "_reset", "mirror", "collect/lean_vmas.py", ("tensordict", "kwargs")
    ),
    PrivateName(
        "torchrl.envs.StepCounter", "_step", "mirror", "collect/lean_vmas.py", ("tensordict", "next_tensordict")
    ),
    PrivateName(
        "torchrl.envs.StepCounter", "_reset", "mirror", "collect/lean_vmas.py", ("tensordict", "tensordict_reset")
    ),
    PrivateName(
        "vmas.simulator.environment.environment.Environment",
        "vmas_random_state",
        "read",
        "run/checkpoints.py (VMAS's one RNG state per process)",
    ),
    # the copies of a turn-based PettingZoo game stepped in one loop (envs/aec_games.py): torchrl's wrapper
    # and SerialEnv, reproduced value for value
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper",
        "_env",
        "read",
        "envs/pettingzoo.py, envs/game_copies.py, envs/aec_games.py",
    ),
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper", "_step", "mirror", "envs/aec_games.py", ("tensordict",)
    ),
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper",
        "_reset",
        "mirror",
        "envs/aec_games.py",
        ("tensordict", "kwargs"),
    ),
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper", "_step_aec", "mirror", "envs/aec_games.py", ("tensordict",)
    ),
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper",
        "_update_action_mask",
        "mirror",
        "envs/aec_games.py",
        ("td", "observation_dict", "info_dict"),
    ),
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper",
        "_aggregate_done",
        "mirror",
        "envs/aec_games.py",
        ("tensordict_out", "use_any"),
    ),
    PrivateName("torchrl.envs.SerialEnv", "_reset", "mirror", "envs/game_copies.py (which copies reset)"),
    # a copy's frame for a video: the copy of a SerialEnv (envs/serial.py)
    PrivateName("torchrl.envs.SerialEnv", "_envs", "read", "envs/serial.py"),
    # the copies of a parallel PettingZoo game stepped in one loop (envs/parallel_games.py): torchrl's wrapper's
    # own step (not the lean one) and SerialEnv, reproduced value for value
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper", "_step", "mirror", "envs/parallel_games.py", ("tensordict",)
    ),
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper",
        "_reset",
        "mirror",
        "envs/parallel_games.py",
        ("tensordict", "kwargs"),
    ),
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper",
        "_step_parallel",
        "mirror",
        "envs/parallel_games.py",
        ("tensordict",),
    ),
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper",
        "_update_agent_mask",
        "mirror",
        "envs/parallel_games.py",
        ("td",),
    ),
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper",
        "_aggregate_done",
        "mirror",
        "envs/parallel_games.py",
        ("tensordict_out", "use_any"),
    ),
    # a parallel game's step, each group's entries written at once (envs/lean_step.py): torchrl's, value for value
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper", "_step", "override", "envs/lean_step.py", ("tensordict",)
    ),
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper", "_step_parallel", "call", "envs/lean_step.py", ("tensordict",)
    ),
    # the game handed to the wrapper, PettingZoo's AEC-to-parallel conversion made lean (envs/aec_parallel.py)
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper", "_build_env", "override", "envs/lean_step.py", ("env",)
    ),
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper", "_update_agent_mask", "call", "envs/lean_step.py", ("td",)
    ),
    PrivateName(
        "torchrl.envs.libs.pettingzoo.PettingZooWrapper",
        "_aggregate_done",
        "call",
        "envs/lean_step.py",
        ("tensordict_out", "use_any"),
    ),
    PrivateName("torchrl._utils", "seed_generator", "import", "envs/aec_games.py (SerialEnv's seed chain)"),
    # the learning-rate schedule a resumed run puts in force (the rate get_last_lr reports)
    PrivateName("torch.optim.lr_scheduler.LRScheduler", "_last_lr", "read", "run/resume.py"),
    # numpy arrays in checkpoints of the earliest format
    PrivateName("numpy._core.multiarray", "_reconstruct", "import", "run/checkpoints.py"),
    # torchrl's TensorBoard logger, its writer made with purge_step on resume
    PrivateName(
        "torchrl.record.loggers.tensorboard.TensorboardLogger", "_create_experiment", "override", "run/logger.py", ()
    ),
    # torchrl's documented extension points of envs and transforms (private by name only)
    PrivateName(
        "torchrl.envs.EnvBase",
        "_step",
        "hook",
        "envs/toy.py, envs/aec_games.py, envs/parallel_games.py",
        ("tensordict",),
    ),
    PrivateName(
        "torchrl.envs.EnvBase",
        "_reset",
        "hook",
        "envs/toy.py, envs/aec_games.py, envs/parallel_games.py",
        ("tensordict", "kwargs"),
    ),
    PrivateName("torchrl.envs.EnvBase", "_set_seed", "hook", "envs/toy.py, envs/game_copies.py", ("seed",)),
    PrivateName("torchrl.envs.Transform", "_call", "hook", "envs/transforms.py", ("next_tensordict",)),
    PrivateName("torchrl.envs.Transform", "_reset", "hook", "envs/transforms.py", ("tensordict", "tensordict_reset")),
    PrivateName("torchrl.envs.Transform", "_step", "hook", "envs/time_limit.py", ("tensordict", "next_tensordict")),
    PrivateName("torchrl.envs.Transform", "_inv_call", "hook", "envs/comm.py", ("tensordict",)),
)
