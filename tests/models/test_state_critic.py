"""A critic on the env's global state (``model.critic_inputs``, ``env.state=true``).

Known answers on a hand-made batch: the ``state`` critic gives every agent the value of the state
alone (its MLP on the state, whatever the observations), ``state_and_observation`` the value of the
agent's own observation followed by the state. Then MaMuJoCo: the root ``state`` reaches the update
and the critic learns from it, the policies never read it, and the bad combinations fail in one line.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Unbounded

from marl_ppo.config import ConfigError, load_config
from marl_ppo.core.update import update_keys
from marl_ppo.groups.specs import GroupSpec
from marl_ppo.models.state_critic import build_state_critic, state_critic_spec
from marl_ppo.run.trainer import Trainer

N, OBS, S = 3, 4, 5


def _spec(state_shape=(S,)) -> GroupSpec:
    return GroupSpec(
        "g",
        ("a", "b", "c"),
        (("g", "observation"),),
        Unbounded(shape=(N, 2)),
        0,
        ("g", "reward"),
        observation_shape=(N, OBS),
        state_spec=Unbounded(shape=state_shape),
    )


def _batch(state: torch.Tensor, obs: torch.Tensor) -> TensorDict:
    return TensorDict({"state": state, "g": TensorDict({"observation": obs}, [state.shape[0], N])}, [state.shape[0]])


def _mlp(critic):
    """The critic's one hidden layer and its output layer (a shared MLP)."""
    linears = [m for m in critic.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 2
    return linears


def _by_hand(critic, x: torch.Tensor) -> torch.Tensor:
    hidden, out = _mlp(critic)
    return out(torch.tanh(hidden(x)))


def test_the_state_critic_gives_each_agent_the_value_of_the_state():
    torch.manual_seed(0)
    critic = build_state_critic(_spec(), "state", hidden=[8])
    state, obs = torch.randn(6, S), torch.randn(6, N, OBS)
    values = critic(_batch(state, obs))["g", "state_value"]
    assert values.shape == (6, N, 1)
    expected = _by_hand(critic, state)  # [6, 1]: the MLP on the state alone
    for agent in range(N):
        torch.testing.assert_close(values[:, agent], expected)
    # the observations are not read; the state is
    other_obs = critic(_batch(state, torch.randn(6, N, OBS)))["g", "state_value"]
    assert torch.equal(other_obs, values)
    other_state = state.clone()
    other_state[0, 2] += 1.0
    changed = critic(_batch(other_state, obs))["g", "state_value"]
    assert not torch.equal(changed[0], values[0]) and torch.equal(changed[1:], values[1:])


def test_the_state_and_observation_critic_reads_the_agents_own_observation_then_the_state():
    torch.manual_seed(1)
    critic = build_state_critic(_spec(), "state_and_observation", hidden=[8])
    state, obs = torch.randn(6, S), torch.randn(6, N, OBS)
    values = critic(_batch(state, obs))["g", "state_value"]
    for agent in range(N):
        by_hand = _by_hand(critic, torch.cat([obs[:, agent], state], dim=-1))
        torch.testing.assert_close(values[:, agent], by_hand)
    assert _mlp(critic)[0].in_features == OBS + S


def test_a_state_critic_without_a_vector_state_is_refused():
    no_state = GroupSpec(
        "g", ("a",), (("g", "observation"),), Unbounded(shape=(1, 2)), 0, None, observation_shape=(1, 3)
    )
    with pytest.raises(ValueError, match="no root 'state' entry.*env.state=true"):
        state_critic_spec(no_state, "state")
    with pytest.raises(ValueError, match=r"reads a vector state.*\[4, 4, 3\]"):
        state_critic_spec(_spec(state_shape=(4, 4, 3)), "state")


QUICK = [
    "env.num_envs=2",
    "env.max_steps=20",
    "env.state=true",
    "train.frames_per_batch=60",
    "train.total_frames=120",
    "train.minibatch_size=30",
    "train.num_epochs=2",
    "train.num_threads=1",
    "model.hidden=[16]",
    "log.eval_every=0",
    "log.eval_episodes=2",
    "log.progress=false",
    "log.plot=false",
]


@pytest.mark.parametrize("algorithm", ["mappo", "happo"])
def test_a_mamujoco_critic_learns_from_the_global_state(tmp_path, algorithm):
    pytest.importorskip("gymnasium_robotics")
    cfg = load_config(f"halfcheetah_2x3_{algorithm}", [*QUICK, "model.critic_inputs=state"])
    trainer = Trainer(cfg, run_dir=tmp_path)
    router = trainer.state.router  # the run's own parameters
    assert "state" in update_keys(router)
    assert router.groups["agent"].state_spec.shape == (17,)  # HalfCheetah: 8 positions and 9 velocities
    assert "state" not in router.policy.in_keys  # the policies read their observations only
    # the critic's first layer reads the 17 state features (the observations have 12)
    params = trainer.state.params()
    first = [v for v in params.values(True, True) if v.ndim >= 2 and v.shape[-1] == 17]
    assert len(first) == 1
    before = first[0].detach().clone()
    summary = trainer.fit()
    assert summary["frames"] == 120
    assert not torch.equal(first[0], before)


def test_bad_state_critic_configs_fail_in_one_line():
    with pytest.raises(ConfigError, match="critic_inputs=state: reads the env.s global state: set env.state=true"):
        load_config("halfcheetah_2x3_mappo", ["model.critic_inputs=state"])
    with pytest.raises(ConfigError, match="critic_inputs=state: loss.algorithm='ippo' has a decentralised critic"):
        load_config("halfcheetah_2x3_mappo", ["env.state=true", "model.critic_inputs=state", "loss.algorithm=ippo"])
    with pytest.raises(ConfigError, match=r"env.kind='vmas' gives no global state \(kinds that do: \['mamujoco'"):
        load_config(overrides=["env.state=true"])
    with pytest.raises(ConfigError, match="state critic is an MLP.*'gru'"):
        load_config("halfcheetah_2x3_mappo", ["env.state=true", "model.critic_inputs=state", "model.critic_kind=gru"])
    with pytest.raises(ConfigError, match="model.critic=global"):
        load_config("halfcheetah_2x3_mappo", ["env.state=true", "model.critic_inputs=state", "model.critic=global"])
    with pytest.raises(ConfigError, match="model.critic_inputs"):
        load_config("halfcheetah_2x3_mappo", ["env.state=true", "model.critic_inputs=obs"])
