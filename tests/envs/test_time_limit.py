"""``env.time_limit``: an episode cut at ``env.max_steps`` is a truncation (bootstrapped) or a termination.

Covered (real VMAS and PettingZoo MPE envs, tiny sizes, no mocks):

* config: ``truncate`` by default, ``terminate`` by override, a bad value is a ``ConfigError``;
* flags: VMAS navigation and PettingZoo ``simple_spread_v3`` batches carry ``truncated=True``,
  ``terminated=False``, ``done=True`` exactly at step ``max_steps`` under ``truncate`` and
  ``terminated=True`` under ``terminate``, root and per group, and the routed
  ``train_terminated``/``train_done`` follow;
* VMAS without ``max_steps`` is the same simulation: under the same actions both settings give the
  same observations, rewards, ``done`` and episode returns (navigation and balance, which ends on
  its own), and a scenario's own ending is ``terminated`` (not ``truncated``) under both; the comm
  adapter keeps its composite action with the step counter after it;
* known-answer GAE through ``GroupRouter.compute_advantages`` on real rollouts: at a time-limit
  step, mid-batch and at the batch's end, the advantage is ``r + gamma V(s') - V(s)`` under
  ``truncate`` and ``r - V(s)`` under ``terminate``, ``V`` the critic's own outputs;
* ``collector.restart`` (every checkpoint's episode boundary) restarts the step count;
* custom envs: the factory's flags are kept under ``truncate``; ``terminate`` folds a factory's
  ``truncated`` into ``terminated``.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from marl_ppo import RewardTable, read_group_specs
from marl_ppo.config import ConfigError, EnvConfig, load_config
from marl_ppo.core.router import GroupRouter
from marl_ppo.envs import make_env

MAX_STEPS = 4
GAMMA = 0.9


def vmas_cfg(time_limit: str, **kw) -> EnvConfig:
    kw.setdefault("kwargs", {"n_agents": 2})
    return EnvConfig(
        scenario=kw.pop("scenario", "navigation"),
        num_envs=kw.pop("num_envs", 3),
        max_steps=MAX_STEPS,
        time_limit=time_limit,
        **kw,
    )


def spread_cfg(time_limit: str) -> EnvConfig:
    return EnvConfig(
        kind="pettingzoo",
        scenario="simple_spread_v3",
        num_envs=2,
        max_steps=MAX_STEPS,
        time_limit=time_limit,
        kwargs={"N": 2},
    )


def flags(td, key) -> torch.Tensor:
    """``td[key]`` as ``[B, T, ...]`` booleans, the root ones without their trailing 1."""
    value = td.get(key)
    return value.squeeze(-1) if value.ndim == 3 else value


def routed(env, td):
    groups = read_group_specs(env)
    RewardTable.own_rewards(groups).bind(groups, env)(td)
    return groups


# -- config ----------------------------------------------------------------------------------------


def test_truncate_is_the_default_and_terminate_an_override():
    assert EnvConfig().time_limit == "truncate"
    assert load_config().env.time_limit == "truncate"
    assert load_config(overrides=["env.time_limit=terminate"]).env.time_limit == "terminate"


def test_a_bad_time_limit_is_a_config_error():
    with pytest.raises(
        ConfigError, match=r"env.time_limit must be one of \['truncate', 'terminate'\], got 'truncated'"
    ):
        load_config(overrides=["env.time_limit=truncated"])


# -- flags -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("make_cfg", [vmas_cfg, spread_cfg], ids=["vmas", "pettingzoo"])
@pytest.mark.parametrize("time_limit", ["truncate", "terminate"])
def test_batches_carry_the_time_limit_flags(make_cfg, time_limit):
    env = make_env(make_cfg(time_limit), seed=0)
    steps = 2 * MAX_STEPS + 1
    td = env.rollout(steps, break_when_any_done=False)
    groups = routed(env, td)
    nxt = td["next"]
    at_limit = torch.zeros(steps, dtype=torch.bool)
    at_limit[MAX_STEPS - 1 :: MAX_STEPS] = True  # steps MAX_STEPS and 2 * MAX_STEPS (1-based)
    at_limit = at_limit.expand(env.batch_size[0], steps)
    assert torch.equal(flags(nxt, "done"), at_limit)
    truncate = time_limit == "truncate"
    assert torch.equal(flags(nxt, "terminated"), at_limit if not truncate else torch.zeros_like(at_limit))
    if truncate:
        assert torch.equal(flags(nxt, "truncated"), at_limit)
    for g, spec in groups.items():
        per_agent = at_limit[:, :, None, None].expand(-1, -1, spec.n_agents, 1)
        assert torch.equal(nxt[g, "train_done"], per_agent)
        assert torch.equal(nxt[g, "train_terminated"], per_agent if not truncate else torch.zeros_like(per_agent))
        if (g, "truncated") in nxt.keys(True):  # PettingZoo writes them per group too
            assert torch.equal(nxt[g, "truncated"], per_agent)
            assert torch.equal(nxt[g, "terminated"], nxt[g, "train_terminated"])
        # episode returns restart after the limit: the first step's return is its reward
        first = torch.arange(steps) % MAX_STEPS == 0
        assert_close(nxt[g, "episode_reward"][:, first], nxt[g, "reward"][:, first])
    env.close()


def test_vmas_truncate_counts_steps_and_keeps_the_group_keys():
    truncating, terminating = make_env(vmas_cfg("truncate"), seed=0), make_env(vmas_cfg("terminate"), seed=0)
    assert truncating.group_map == terminating.group_map
    assert set(truncating.done_keys) == {"done", "terminated", "truncated"}
    assert set(terminating.done_keys) == {"done", "terminated"}  # VMAS's max_steps, as before
    assert truncating.base_env.max_steps is None and terminating.max_steps == MAX_STEPS
    td = truncating.rollout(MAX_STEPS + 2, break_when_any_done=False)
    assert td["next", "step_count"][0].squeeze(-1).tolist() == [1, 2, 3, 4, 1, 2]


def same_actions_rollout(env, steps, push=None, seed=1):
    """A rollout whose actions come from a fixed generator (plus a constant ``push``), the same
    whichever env it drives."""
    gen = torch.Generator().manual_seed(seed)
    td = env.reset()
    out = []
    for _ in range(steps):
        for g in env.group_map:
            spec = env.full_action_spec[g, "action"]
            action = spec.space.low + (spec.space.high - spec.space.low) * torch.rand(spec.shape, generator=gen)
            if push is not None:
                action = (torch.tensor(push) + 0.3 * action).clamp(spec.space.low, spec.space.high)
            td[g, "action"] = action
        td, nxt_root = env.step_and_maybe_reset(td)
        out.append(td.clone())
        td = nxt_root
    return torch.stack(out, dim=1)


@pytest.mark.parametrize(
    "scenario, max_steps, steps, push",
    [("navigation", MAX_STEPS, 2 * MAX_STEPS + 1, None), ("balance", 50, 60, [1.0, 0.0])],
)
def test_vmas_without_max_steps_is_the_same_simulation(scenario, max_steps, steps, push):
    tds = {}
    for tl in ("truncate", "terminate"):
        cfg = EnvConfig(scenario=scenario, num_envs=8, max_steps=max_steps, time_limit=tl, kwargs={"n_agents": 2})
        tds[tl] = same_actions_rollout(make_env(cfg, seed=3), steps, push)
    a, b = tds["truncate"], tds["terminate"]
    for key in (
        ("next", "agents", "observation"),
        ("next", "agents", "reward"),
        ("next", "agents", "episode_reward"),
        ("agents", "observation"),
    ):
        assert torch.equal(a[key], b[key]), key
    assert torch.equal(a["next", "done"], b["next", "done"])
    at_limit = a["next", "step_count"] == max_steps
    # the scenario's own endings are terminations under both; the time limit only under terminate
    own_end = a["next", "terminated"]
    assert torch.equal(b["next", "terminated"], own_end | at_limit)
    assert torch.equal(a["next", "truncated"], at_limit)
    assert torch.equal(a["next", "done"], own_end | at_limit)
    if scenario == "balance":  # it does end on its own within the rollout, and the count restarts there
        assert own_end.any() and not (own_end & at_limit).any()
        ended = own_end.squeeze(-1)[:, :-1]
        assert (a["next", "step_count"].squeeze(-1)[:, 1:][ended] == 1).all()


def test_vmas_comm_adapter_with_the_step_counter():
    cfg = EnvConfig(scenario="simple_speaker_listener", num_envs=2, max_steps=MAX_STEPS, comm=True, kwargs={})
    env = make_env(cfg, seed=0)
    assert [type(t).__name__ for t in env.transform] == ["CommAdapter", "StepCounter", "RewardSum"]
    td = env.rollout(MAX_STEPS, break_when_any_done=False)
    assert sorted(td["speaker", "action"].keys()) == ["comm", "move"]
    assert flags(td["next"], "truncated")[:, -1].all() and not flags(td["next"], "terminated").any()


# -- known-answer GAE -------------------------------------------------------------------------------


@pytest.mark.parametrize("make_cfg", [vmas_cfg, spread_cfg], ids=["vmas", "pettingzoo"])
@pytest.mark.parametrize("time_limit", ["truncate", "terminate"])
def test_gae_bootstraps_at_a_truncated_step_only(make_cfg, time_limit):
    torch.manual_seed(0)
    env = make_env(make_cfg(time_limit), seed=0)
    groups = read_group_specs(env)
    router = GroupRouter.from_specs(groups, hidden=(16,), gamma=GAMMA, lmbda=0.8)
    steps = MAX_STEPS + 2  # a time limit mid-batch (step MAX_STEPS) and a cut at the batch's end
    with torch.no_grad():
        td = env.rollout(steps, router.policy, break_when_any_done=False)
    routed(env, td)
    router.compute_advantages(td)
    limit = MAX_STEPS - 1
    for g, spec in groups.items():
        critic = router.losses[g].critic_network
        with torch.no_grad():
            value = critic(td.clone())[g, "state_value"]
            next_value = critic(td["next"].clone())[g, "state_value"]  # the last real next observation
        reward = td["next", g, "reward"]
        adv = td[g, "advantage"]
        bootstrap = GAMMA * next_value[:, limit] if time_limit == "truncate" else 0.0
        assert_close(adv[:, limit], reward[:, limit] + bootstrap - value[:, limit], rtol=1e-5, atol=1e-6)
        # the batch's last step (not at a limit): always bootstrapped
        last = steps - 1
        assert_close(adv[:, last], reward[:, last] + GAMMA * next_value[:, last] - value[:, last], rtol=1e-5, atol=1e-6)
        assert (next_value[:, limit] != 0).all()  # the bootstrap term is really there to tell apart
    env.close()


# -- restarts and custom envs -----------------------------------------------------------------------


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "torchrl"])
def test_collector_restart_restarts_the_step_count(lean):
    from marl_ppo.run.build import build_collector

    cfg = load_config(
        overrides=[
            "env.num_envs=2",
            f"env.max_steps={MAX_STEPS}",
            "env.kwargs.n_agents=2",
            "train.frames_per_batch=6",
            "train.minibatch_size=6",
        ]
    )
    env = make_env(cfg.env, seed=0)
    router = GroupRouter.from_specs(read_group_specs(env), hidden=(8,))
    collector = build_collector(cfg, env, router.policy, total_frames=-1, lean=lean)
    assert (type(collector).__name__ == "LeanVmasCollector") == lean
    batches = iter(collector)
    first = next(batches)
    assert first["next", "step_count"][0].squeeze(-1).tolist() == [1, 2, 3]  # mid-episode at the end
    assert collector.restart(7)
    second = next(batches)
    assert second["next", "step_count"][0].squeeze(-1).tolist() == [1, 2, 3]
    assert not second["next", "truncated"].any()
    collector.shutdown()


def spread_factory(seed: int, max_steps: int):
    """A custom factory: one PettingZoo simple_spread game, wrapped by hand (it reports truncations)."""
    import mpe2.simple_spread_v3 as spread
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    return PettingZooWrapper(
        spread.parallel_env(N=2, max_cycles=max_steps, continuous_actions=True),
        use_mask=True,
        seed=seed,
        categorical_actions=True,
    )


@pytest.mark.parametrize("time_limit", ["truncate", "terminate"])
def test_custom_factory_keeps_its_flags_or_folds_truncation(time_limit):
    cfg = EnvConfig(kind="custom", num_envs=2, max_steps=MAX_STEPS, time_limit=time_limit, kwargs={})
    env = make_env(cfg, seed=0, env_fn=spread_factory)
    td = env.rollout(MAX_STEPS, break_when_any_done=False)
    groups = routed(env, td)
    nxt = td["next"]
    assert nxt["truncated"][-1].all() and nxt["done"][-1].all() and not nxt["done"][:-1].any()
    assert bool(nxt["terminated"][-1].all()) == (time_limit == "terminate")
    for g in groups:
        assert bool(nxt[g, "train_terminated"][-1].all()) == (time_limit == "terminate")
        assert not nxt[g, "train_terminated"][:-1].any()
        assert nxt[g, "train_done"][-1].all()
    env.close()


def toy_factory(num_envs: int, max_steps: int, seed: int):
    from marl_ppo.envs.toy import HybridTargetEnv

    return HybridTargetEnv(num_envs=num_envs, max_steps=max_steps, seed=seed)


def test_custom_factory_without_truncation_is_left_as_it_is():
    for time_limit in ("truncate", "terminate"):
        cfg = EnvConfig(kind="custom", num_envs=2, max_steps=3, time_limit=time_limit, kwargs={})
        env = make_env(cfg, seed=0, env_fn=toy_factory)
        assert type(env.transform).__name__ == "RewardSum"  # nothing folded
        nxt = env.rollout(3, break_when_any_done=False)["next"]
        assert nxt["terminated"][:, -1].all()  # the toy env's own horizon is a termination
