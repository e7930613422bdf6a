"""Shared fixtures: every test starts from the same torch seed; one Ray cluster per session; the tiny
VMAS config; a PPO update that dies mid-run.

The tests are laid out as the package: ``tests/<layer>/`` for each layer of ``marl_ppo/`` (groups,
models, envs, core, collect, run, suite), the whole-package checks (layers, upstream names, style,
docs, examples, benchmarks) at the top. ``pytest -m "not slow"`` skips the whole runs, subprocesses
and clusters (the everyday tier).
"""

import pytest
import torch

TINY_FPB = 40  # frames per batch of the tiny runs: 4 envs x 10 steps
TINY = [
    "env.num_envs=4",
    "env.max_steps=10",
    "env.kwargs.n_agents=2",
    f"train.frames_per_batch={TINY_FPB}",
    f"train.total_frames={2 * TINY_FPB}",
    "train.num_epochs=1",
    f"train.minibatch_size={TINY_FPB}",  # one minibatch per iteration: one router call per iteration
    "model.hidden=[16]",
    "log.eval_every=0",
    "log.eval_episodes=2",
    "log.checkpoint_every=1",
    "log.progress=false",
    "log.plot=false",
]


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)
    return 0


@pytest.fixture(scope="session")
def ray_cluster():
    """One small local Ray cluster for the whole test session (2 CPUs, 200 MB object store); its
    address, for subprocesses (``RAY_ADDRESS``). Shut down at the end: nothing is left running."""
    import ray  # the `cluster` extra, installed by `make test`

    if not ray.is_initialized():
        ray.init(num_cpus=2, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture
def tiny_config():
    """``tiny_config(path=None, overrides=None)``: VMAS navigation with 2 agents (or ``path``'s config),
    4 envs x 10 steps a batch (``tiny_config.fpb`` frames), two iterations, a 16-unit MLP, a checkpoint
    every iteration, no evaluation, no plots; ``overrides`` applied last. ``tiny_config.overrides``: the
    same as ``key=value`` strings, for the command line."""
    from marl_ppo.config import load_config

    def make(path=None, overrides=None):
        return load_config(path, overrides=TINY + list(overrides or []))

    make.fpb, make.overrides = TINY_FPB, list(TINY)
    return make


@pytest.fixture
def dying_update(monkeypatch):
    """``dying_update(after, message)``: the trainer's PPO update raises ``RuntimeError(message)`` from its
    ``after + 1``-th call on (a run killed during an iteration); returns the call counter
    (``{"n": calls}``). ``dying_update.disarm()`` puts the real update back."""
    import marl_ppo.core.update as update_mod  # the joint update mode, which the trainer looks up each iteration

    real_update = update_mod.ppo_update

    def arm(after: int, message: str = "simulated kill") -> dict:
        calls = {"n": 0}

        def update(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] > after:
                raise RuntimeError(message)
            return real_update(*args, **kwargs)

        monkeypatch.setattr(update_mod, "ppo_update", update)
        return calls

    arm.disarm = lambda: monkeypatch.setattr(update_mod, "ppo_update", real_update)
    return arm


@pytest.fixture
def isolated():
    """``isolated(*tables)``: what this test registers in each :class:`~marl_ppo.table.Table` is gone after it."""
    import contextlib

    with contextlib.ExitStack() as stack:
        yield lambda *tables: [stack.enter_context(table.scoped()) for table in tables]
