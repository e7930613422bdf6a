"""Tests for :mod:`marl_ppo.groups.reward_table`: the explicit env-signal -> training-reward/done mapping.

Covered:

* routing known answers on a hand-made three-group batch (``red`` 2 agents, ``green`` 2 agents,
  ``blue`` 1 agent; batch ``[B=2, T=3]``): own reward, a team reward (mean / sum over two groups'
  agents) shared by both groups, zero-sum rows (weight -1, reduced and per agent), a root signal
  ``("reward",)`` of shape ``[*B, 1]`` broadcast to the agents, a reduced per-agent signal, and a
  weighted sum of all of these. Every expected value is computed by hand with plain torch ops;
* done routing: root done broadcast to ``[*B, n, 1]``, the group's own done, ``"auto"``;
  including the 1-agent group whose per-agent shapes ``[1, 1]`` are ambiguous with ``[1]``;
* the env's raw entries are left untouched by applying the table;
* the YAML/dict form (``from_dict`` == Python form, ``to_dict`` round trip, ``yaml.safe_load``);
* the printed table names every group and its formula;
* every bad input raises :class:`RewardTableError` (a ``ValueError``) whose message names the problem;
* a real VMAS env (``simple_tag``: adversary x3, agent x1) with a team reward shared by both groups.
"""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from tensordict import TensorDict
from torch.testing import assert_close

from marl_ppo import RewardTable, RewardTableError, own, read_group_specs, signal, team
from marl_ppo.groups.reward_table import GroupRow

B, T = 2, 3
N_AGENTS = {"red": 2, "green": 2, "blue": 1}
# Per-step shapes of what the hand-made env writes under "next" (env batch dims removed).
SIGNALS = {
    ("red", "reward"): (2, 1),
    ("green", "reward"): (2, 1),
    ("blue", "reward"): (1, 1),
    ("blue", "done"): (1, 1),
    ("blue", "terminated"): (1, 1),
    ("reward",): (1,),
    ("done",): (1,),
    ("terminated",): (1,),
}


def make_batch() -> TensorDict:
    """A [B=2, T=3] batch with distinct, exactly representable values everywhere."""
    red = (torch.arange(B * T * 2, dtype=torch.float32).reshape(B, T, 2, 1) - 5.0) * 0.5
    green = torch.arange(B * T * 2, dtype=torch.float32).reshape(B, T, 2, 1) * 0.25 + 1.0
    blue = torch.arange(B * T, dtype=torch.float32).reshape(B, T, 1, 1) * -1.5 + 0.75
    root_reward = torch.tensor([[[0.5], [-1.0], [2.0]], [[4.0], [0.0], [-0.25]]])
    root_done = torch.tensor([[[False], [False], [True]], [[False], [True], [False]]])
    root_term = torch.tensor([[[False], [False], [True]], [[False], [False], [False]]])
    # blue's own done differs from the root done, so a test can tell which one was routed
    blue_done = torch.tensor([[[[True]], [[False]], [[False]]], [[[False]], [[False]], [[True]]]])
    blue_term = torch.tensor([[[[True]], [[False]], [[False]]], [[[False]], [[False]], [[False]]]])
    nxt = TensorDict(
        {
            "red": TensorDict({"reward": red}, [B, T, 2]),
            "green": TensorDict({"reward": green}, [B, T, 2]),
            "blue": TensorDict({"reward": blue, "done": blue_done, "terminated": blue_term}, [B, T, 1]),
            "reward": root_reward,
            "done": root_done,
            "terminated": root_term,
        },
        [B, T],
    )
    return TensorDict({"next": nxt}, [B, T])


def bind(table: RewardTable, signals=SIGNALS, n_agents=N_AGENTS):
    return table.bind_shapes(n_agents, signals)


def raw(td, *key):
    return td.get(("next", *key))


def train(td, group, what="reward"):
    return td.get(("next", group, f"train_{what}"))


def per_env(x: torch.Tensor, n: int) -> torch.Tensor:
    """A per-env value [B, T, 1] (or [B, T, 1, 1]) spread to [B, T, n, 1] by hand."""
    if x.dim() == 3:
        x = x.unsqueeze(-2)
    return torch.cat([x] * n, dim=-2)


# -- reward routing: known answers ------------------------------------------------------------


def test_own_reward_is_the_raw_reward():
    td = bind(RewardTable.own_rewards(["red", "green", "blue"]))(make_batch())
    for g, n in N_AGENTS.items():
        assert train(td, g).shape == (B, T, n, 1)
        assert torch.equal(train(td, g), raw(td, g, "reward"))


@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_team_reward_shared_by_two_groups(reduce):
    table = RewardTable(
        {
            "red": [team(["red", "blue"], reduce=reduce)],
            "blue": [team(["red", "blue"], reduce=reduce)],
            "green": [own()],
        }
    )
    td = bind(table)(make_batch())
    r, b = raw(td, "red", "reward"), raw(td, "blue", "reward")
    total = r[:, :, 0] + r[:, :, 1] + b[:, :, 0]  # [B, T, 1]: all three agents of both groups
    expected = total / 3.0 if reduce == "mean" else total
    assert_close(train(td, "red"), per_env(expected, 2))
    assert_close(train(td, "blue"), per_env(expected, 1))
    # one number per env, identical for every agent of both groups
    assert torch.equal(train(td, "red")[:, :, 0], train(td, "red")[:, :, 1])
    assert torch.equal(train(td, "red")[:, :, :1], train(td, "blue"))
    # green's own row is not affected by the team rows
    assert torch.equal(train(td, "green"), raw(td, "green", "reward"))


def test_zero_sum_rows_negate_the_other_group():
    table = RewardTable(
        {
            "red": [own()],
            "blue": [team(["red"], reduce="sum", weight=-1.0)],  # one number per env
            "green": [team(["red"], reduce="none", weight=-1.0)],  # agent i <- -red agent i
        }
    )
    td = bind(table)(make_batch())
    r = raw(td, "red", "reward")
    assert torch.equal(train(td, "blue"), -(r[:, :, :1] + r[:, :, 1:]))
    assert torch.equal(train(td, "green"), -r)
    assert torch.equal(train(td, "red") + train(td, "green"), torch.zeros(B, T, 2, 1))
    assert torch.equal(train(td, "blue").sum(-2) + train(td, "red").sum(-2), torch.zeros(B, T, 1))


def test_team_mean_of_another_group_with_negative_weight():
    table = RewardTable({"red": [own()], "green": [own()], "blue": [team("red", weight=-1.0)]})
    td = bind(table)(make_batch())
    r = raw(td, "red", "reward")
    assert_close(train(td, "blue"), -(r[:, :, :1] + r[:, :, 1:]) / 2.0)


def test_root_signal_is_broadcast_to_every_agent():
    table = RewardTable(
        {
            "red": [signal("reward")],
            "blue": [signal(("reward",), weight=2.0)],  # the 1-agent group: [*B, 1] -> [*B, 1, 1]
            "green": [own()],
        }
    )
    td = bind(table)(make_batch())
    root = raw(td, "reward")  # [B, T, 1]
    assert train(td, "red").shape == (B, T, 2, 1)
    assert train(td, "blue").shape == (B, T, 1, 1)
    assert torch.equal(train(td, "red")[:, :, 0], root)
    assert torch.equal(train(td, "red")[:, :, 1], root)
    assert torch.equal(train(td, "blue")[:, :, 0], 2.0 * root)


def test_weighted_sum_of_terms():
    table = RewardTable(
        {
            "red": [
                own(2.0),
                team(["red", "green", "blue"], reduce="mean", weight=0.5),
                signal("reward", weight=-0.25),
            ],
            "green": [own(), signal(("red", "reward"), reduce="mean", weight=3.0)],
            "blue": [own(-1.0), team(["green"], reduce="sum", weight=0.125), signal("reward")],
        }
    )
    td = bind(table)(make_batch())
    r, gr, b = raw(td, "red", "reward"), raw(td, "green", "reward"), raw(td, "blue", "reward")
    root = raw(td, "reward").unsqueeze(-2)  # [B, T, 1, 1]
    all5 = (r[:, :, :1] + r[:, :, 1:] + gr[:, :, :1] + gr[:, :, 1:] + b) / 5.0
    assert_close(train(td, "red"), 2.0 * r + 0.5 * all5 - 0.25 * root)
    assert_close(train(td, "green"), gr + 3.0 * (r[:, :, :1] + r[:, :, 1:]) / 2.0)
    assert_close(train(td, "blue"), -b + 0.125 * (gr[:, :, :1] + gr[:, :, 1:]) + root)
    for g, n in N_AGENTS.items():
        assert train(td, g).shape == (B, T, n, 1)


def test_group_row_and_done_mapping_are_equivalent():
    a = RewardTable({"red": GroupRow((own(),), done="root"), "green": [own()], "blue": [own()]})
    b = RewardTable({"red": [own()], "green": [own()], "blue": [own()]}, done={"red": "root"})
    assert a == b
    assert a != RewardTable({"red": [own()], "green": [own()], "blue": [own()]}, done={"red": "own"})


# -- done routing -------------------------------------------------------------------------------


def test_root_done_is_broadcast_to_agents():
    table = RewardTable(RewardTable.own_rewards(N_AGENTS).rows, done={g: "root" for g in N_AGENTS})
    td = bind(table)(make_batch())
    root_done, root_term = raw(td, "done"), raw(td, "terminated")
    for g, n in N_AGENTS.items():
        done, term = train(td, g, "done"), train(td, g, "terminated")
        assert done.shape == term.shape == (B, T, n, 1)
        assert done.dtype == term.dtype == torch.bool
        assert torch.equal(done, per_env(root_done, n))
        assert torch.equal(term, per_env(root_term, n))
    # blue has its own done, but the row asked for the root one
    assert not torch.equal(train(td, "blue", "done"), raw(td, "blue", "done"))


def test_own_done_for_the_one_agent_group():
    table = RewardTable(RewardTable.own_rewards(N_AGENTS).rows, done={"blue": "own"})
    td = bind(table)(make_batch())
    assert train(td, "blue", "done").shape == (B, T, 1, 1)
    assert torch.equal(train(td, "blue", "done"), raw(td, "blue", "done"))
    assert torch.equal(train(td, "blue", "terminated"), raw(td, "blue", "terminated"))
    # the own done differs from the root done in this batch
    assert not torch.equal(train(td, "blue", "done"), per_env(raw(td, "done"), 1))


def test_auto_done_picks_own_when_present_else_root():
    td = bind(RewardTable.own_rewards(N_AGENTS))(make_batch())  # every done source "auto"
    assert torch.equal(train(td, "blue", "done"), raw(td, "blue", "done"))
    assert torch.equal(train(td, "blue", "terminated"), raw(td, "blue", "terminated"))
    for g in ("red", "green"):
        assert torch.equal(train(td, g, "done"), per_env(raw(td, "done"), 2))
        assert torch.equal(train(td, g, "terminated"), per_env(raw(td, "terminated"), 2))


def test_root_done_without_root_terminated_uses_done():
    signals = {k: v for k, v in SIGNALS.items() if k != ("terminated",)}
    td = make_batch()
    del td["next", "terminated"]
    td = bind(RewardTable.own_rewards(N_AGENTS), signals)(td)
    assert torch.equal(train(td, "red", "terminated"), per_env(raw(td, "done"), 2))


def test_table_applies_to_any_leading_batch_shape():
    bound = bind(RewardTable.own_rewards(N_AGENTS))
    flat = bound(make_batch().reshape(-1))  # [B*T]
    full = bound(make_batch())
    for g, n in N_AGENTS.items():
        assert train(flat, g).shape == (B * T, n, 1)
        assert torch.equal(train(flat, g), train(full, g).reshape(B * T, n, 1))
        assert torch.equal(train(flat, g, "done"), train(full, g, "done").reshape(B * T, n, 1))


# -- raw rewards untouched ------------------------------------------------------------------------


def test_raw_env_entries_are_untouched():
    table = RewardTable(
        {
            "red": [own(2.0), team(["red", "blue"], weight=0.5), signal("reward", weight=-1.0)],
            "green": [team(["red"], reduce="none", weight=-1.0)],
            "blue": [own(-3.0), team(["green"], reduce="sum")],
        },
        done={"red": "root", "blue": "own"},
    )
    td = make_batch()
    before = td.clone()
    bind(table)(td)
    for key in before.keys(include_nested=True, leaves_only=True):
        assert torch.equal(td.get(key), before.get(key)), key
    added = set(td.keys(True, True)) - set(before.keys(True, True))
    assert added == {("next", g, f"train_{w}") for g in N_AGENTS for w in ("reward", "done", "terminated")}


# -- YAML / dict form ---------------------------------------------------------------------------

YAML_TABLE = """
red:
  reward: [{own: 1.0}, {team: [red, blue], reduce: mean, weight: 0.5}]
  done: root
green: [{group: red, reduce: none, weight: -1.0}]   # a bare list is the reward
blue:
  reward: [{key: reward, weight: 2.0}, {own: 0.5}, {key: [red, reward], reduce: sum, weight: -0.5}]
  done: own
"""


def python_table() -> RewardTable:
    return RewardTable(
        {
            "red": [own(1.0), team(["red", "blue"], reduce="mean", weight=0.5)],
            "green": [team(["red"], reduce="none", weight=-1.0)],
            "blue": GroupRow(
                (signal("reward", weight=2.0), own(0.5), signal(("red", "reward"), reduce="sum", weight=-0.5)),
                done="own",
            ),
        },
        done={"red": "root"},
    )


def test_from_yaml_equals_python_form():
    from_yaml = RewardTable.from_dict(yaml.safe_load(YAML_TABLE))
    assert from_yaml == python_table()
    assert from_yaml != RewardTable.own_rewards(["red", "green", "blue"])
    # and the two route identically
    a, b = bind(from_yaml)(make_batch()), bind(python_table())(make_batch())
    for g in N_AGENTS:
        for w in ("reward", "done", "terminated"):
            assert torch.equal(train(a, g, w), train(b, g, w))


def test_to_dict_round_trips():
    table = python_table()
    d = table.to_dict()
    assert RewardTable.from_dict(d) == table
    assert RewardTable.from_dict(d).to_dict() == d
    # and through YAML text
    assert RewardTable.from_dict(yaml.safe_load(yaml.safe_dump(d))) == table
    assert d["red"]["done"] == "root" and d["blue"]["done"] == "own" and d["green"]["done"] == "auto"


def test_from_dict_short_forms():
    table = RewardTable.from_dict({"red": "own", "green": [{"own": None}], "blue": {"reward": {"own": 2}}})
    assert table == RewardTable({"red": [own()], "green": [own()], "blue": [own(2.0)]})


# -- printing -------------------------------------------------------------------------------------


def test_bound_table_prints_each_group_and_formula():
    text = str(bind(python_table()))
    lines = text.splitlines()

    def line_of(group):
        (line,) = [ln for ln in lines if ln.strip().startswith(group)]
        return line

    assert "[2 agents]" in line_of("red")
    assert "1 × own reward (red.reward) + 0.5 × mean(red, blue reward)" in line_of("red")
    assert "-1 × red reward (per agent)" in line_of("green")
    assert "2 × reward + 0.5 × own reward (blue.reward) + -0.5 × sum(red.reward)" in line_of("blue")
    assert "[1 agents]" in line_of("blue")
    # each group's reward line is followed by its done line, which names the done's source
    done_of = {g: lines[lines.index(line_of(g)) + 1] for g in N_AGENTS}
    assert all("done   <- " in ln for ln in done_of.values())
    assert "root" in done_of["red"] and "root" in done_of["green"]  # red asked for root, green auto -> root
    assert "blue.done" in done_of["blue"] and "root" not in done_of["blue"]
    assert repr(bind(python_table())) == text


def test_unbound_table_prints_each_group():
    text = str(python_table())
    for g in N_AGENTS:
        assert f"  {g}" in text
    assert "done   <- root" in text and "done   <- own" in text and "done   <- auto" in text


# -- errors -----------------------------------------------------------------------------------------


def test_reward_table_error_is_a_value_error():
    assert issubclass(RewardTableError, ValueError)
    with pytest.raises(ValueError):
        bind(RewardTable({"red": [own()], "green": [own()]}))


def test_unknown_key_names_it_and_lists_what_exists():
    table = RewardTable({"red": [own(), signal("bonus")], "green": [own()], "blue": [own()]})
    with pytest.raises(RewardTableError, match=r"group 'red'.*'bonus'") as err:
        bind(table)
    msg = str(err.value)
    assert "red.reward" in msg and "blue.reward" in msg  # what exists


def test_unmapped_group_is_named():
    with pytest.raises(RewardTableError, match=r"\['blue'\] have no row") as err:
        bind(RewardTable({"red": [own()], "green": [own()]}))
    assert "rows exist for ['green', 'red']" in str(err.value)


def test_row_for_a_group_the_env_lacks():
    table = RewardTable({g: [own()] for g in [*N_AGENTS, "purple"]})
    with pytest.raises(RewardTableError, match=r"\['purple'\].*does not have") as err:
        bind(table)
    assert "['red', 'green', 'blue']" in str(err.value)


def test_team_naming_an_unknown_group():
    table = RewardTable({"red": [team(["red", "ghost"])], "green": [own()], "blue": [own()]})
    with pytest.raises(RewardTableError, match=r"group 'red'.*names group 'ghost'"):
        bind(table)


def test_signal_that_cannot_broadcast():
    signals = {**SIGNALS, ("bonus",): (3, 1)}
    table = RewardTable({"red": [signal("bonus")], "green": [own()], "blue": [own()]})
    with pytest.raises(RewardTableError, match=r"group 'red'.*'bonus'.*\[3, 1\].*cannot broadcast.*\[2, 1\]"):
        bind(table, signals)


def test_per_agent_reward_missing_trailing_one():
    signals = {**SIGNALS, ("red", "reward"): (2,)}
    with pytest.raises(RewardTableError, match=r"group 'red'.*red\.reward.*trailing 1"):
        bind(RewardTable.own_rewards(N_AGENTS), signals)
    # the same reward read as another group's team reward
    table = RewardTable({"red": [signal("reward")], "green": [team("red")], "blue": [own()]})
    with pytest.raises(RewardTableError, match=r"group 'green'.*trailing 1"):
        bind(table, signals)


def test_signal_missing_trailing_one():
    signals = {**SIGNALS, ("bonus",): (2,)}
    table = RewardTable({"red": [signal("bonus")], "green": [own()], "blue": [own()]})
    with pytest.raises(RewardTableError, match=r"group 'red'.*'bonus'.*trailing 1"):
        bind(table, signals)


def test_per_agent_team_reward_with_mismatched_agents():
    table = RewardTable({"red": [own()], "green": [own()], "blue": [team("red", reduce="none")]})
    with pytest.raises(RewardTableError, match=r"group 'blue' \(1 agents\).*'red'.*\(2 agents\)"):
        bind(table)
    with pytest.raises(RewardTableError, match="ambiguous"):
        team(["red", "green"], reduce="none")


def test_own_done_when_env_has_none():
    table = RewardTable(RewardTable.own_rewards(N_AGENTS).rows, done={"red": "own"})
    with pytest.raises(RewardTableError, match=r"group 'red': done 'own' needs a per-group done"):
        bind(table)


def test_root_done_when_env_has_none():
    signals = {k: v for k, v in SIGNALS.items() if k not in {("done",), ("terminated",)}}
    with pytest.raises(RewardTableError, match=r"group 'red': done 'root' needs a root 'done'"):
        bind(RewardTable.own_rewards(N_AGENTS), signals)


def test_own_reward_when_env_writes_none():
    signals = {k: v for k, v in SIGNALS.items() if k != ("green", "reward")}
    with pytest.raises(RewardTableError, match=r"group 'green': own\(\) needs .*red\.reward"):
        bind(RewardTable.own_rewards(N_AGENTS), signals)


def test_unknown_term_field_in_from_dict():
    with pytest.raises(RewardTableError, match=r"group 'red'.*unknown reward term field.*'wieght'"):
        RewardTable.from_dict({"red": [{"team": ["red"], "wieght": 2.0}]})


def test_unknown_row_field_in_from_dict():
    with pytest.raises(RewardTableError, match=r"group 'red'.*unknown row field.*'dnoe'"):
        RewardTable.from_dict({"red": {"reward": [{"own": 1.0}], "dnoe": "root"}})


def test_bad_done_source():
    with pytest.raises(RewardTableError, match=r"done must be 'auto', 'own' or 'root', got 'global'"):
        RewardTable({"red": [own()]}, done={"red": "global"})
    with pytest.raises(RewardTableError, match=r"\['blue'\].*no reward row"):
        RewardTable({"red": [own()]}, done={"blue": "root"})


def test_empty_row():
    with pytest.raises(RewardTableError, match=r"group 'red' has an empty reward row"):
        RewardTable({"red": []})


@pytest.mark.parametrize(
    "make",
    [
        lambda: own(math.nan),
        lambda: own(math.inf),
        lambda: team(["red"], weight=-math.inf),
        lambda: signal("reward", weight=float("nan")),
        lambda: RewardTable.from_dict(yaml.safe_load("red: [{group: blue, weight: .inf}]")),
        lambda: RewardTable.from_dict(yaml.safe_load("red: [{own: .nan}]")),
    ],
)
def test_non_finite_weight(make):
    with pytest.raises(RewardTableError, match="finite"):
        make()


# -- a real VMAS env --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tag_env():
    from torchrl.envs.libs.vmas import VmasEnv

    torch.manual_seed(0)
    env = VmasEnv("simple_tag", num_envs=4, continuous_actions=True, seed=0, max_steps=8)
    yield env
    env.close()


def test_vmas_team_reward_shared_by_both_groups(tag_env):
    groups = read_group_specs(tag_env)
    assert {g: s.n_agents for g, s in groups.items()} == {"adversary": 3, "agent": 1}
    table = RewardTable(
        {
            "adversary": [own(1.0), team(["adversary", "agent"], reduce="mean", weight=0.5)],
            "agent": [own(1.0), team(["adversary", "agent"], reduce="mean", weight=0.5)],
        }
    )
    bound = table.bind(groups, tag_env)
    assert "adversary" in str(bound) and "agent" in str(bound)
    steps = 6
    with torch.no_grad():
        td = tag_env.rollout(steps, break_when_any_done=False)
    before = td.clone()
    bound(td)
    adv_r, ag_r = raw(td, "adversary", "reward"), raw(td, "agent", "reward")
    team_mean = (adv_r.sum(-2, keepdim=True) + ag_r) / 4.0  # [4, T, 1, 1]
    for g, n in (("adversary", 3), ("agent", 1)):
        assert train(td, g).shape == (4, steps, n, 1)
        assert train(td, g, "done").shape == (4, steps, n, 1)
        assert_close(train(td, g), raw(td, g, "reward") + 0.5 * team_mean.expand(4, steps, n, 1))
        # VMAS has only a root done: "auto" routes it to every agent
        assert torch.equal(train(td, g, "done"), per_env(raw(td, "done"), n))
        assert torch.equal(train(td, g, "terminated"), per_env(raw(td, "terminated"), n))
        assert torch.equal(raw(td, g, "reward"), before.get(("next", g, "reward")))


def test_vmas_bad_tables_are_rejected(tag_env):
    groups = read_group_specs(tag_env)
    with pytest.raises(RewardTableError, match=r"group 'agent': done 'own' needs a per-group done"):
        RewardTable(RewardTable.own_rewards(groups).rows, done={"agent": "own"}).bind(groups, tag_env)
    # VMAS writes no global reward: naming one lists the rewards it does write
    with pytest.raises(RewardTableError, match=r"'reward', which the env does not write.*adversary\.reward"):
        RewardTable({"adversary": [own()], "agent": [signal("reward")]}).bind(groups, tag_env)
    with pytest.raises(RewardTableError, match=r"\['agent'\] have no row"):
        RewardTable({"adversary": [own()]}).bind(groups, tag_env)


def test_a_group_without_its_agent_dim_is_refused_when_its_specs_are_read():
    """torchrl's multi-agent layout: a group's sub-tensordict is [*B, n_agents]; without the agent dim the
    losses would fail later on a shape (after the run directory exists). Refused at read_group_specs."""
    from torchrl.data import Composite, Unbounded
    from torchrl.envs import EnvBase

    from marl_ppo import GroupSpecError, read_group_specs

    class NoAgentDim(EnvBase):
        def __init__(self):
            super().__init__(batch_size=[4])
            self.group_map = {"agents": ["a0", "a1"]}
            self.observation_spec = Composite(
                agents=Composite(observation=Unbounded((4, 2, 3)), shape=(4,)), shape=(4,)
            )
            self.action_spec = Composite(agents=Composite(action=Unbounded((4, 2, 1)), shape=(4,)), shape=(4,))
            self.reward_spec = Composite(agents=Composite(reward=Unbounded((4, 2, 1)), shape=(4,)), shape=(4,))

        def _reset(self, td=None):
            raise NotImplementedError

        def _step(self, td):
            raise NotImplementedError

        def _set_seed(self, seed):
            pass

    with pytest.raises(GroupSpecError, match=r"group 'agents' \(2 agents\).*shape \[4\].*\[4, 2\]"):
        read_group_specs(NoAgentDim())
