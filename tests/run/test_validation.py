"""Every bad value is refused before training, naming the key, the value and what is allowed.

Each case goes through the command line as a user would type it (``marl-ppo train key=value``):
it returns 1 with one ``ConfigError`` line on stderr, and no run directory is created. Reward
tables: the same from a config's ``reward_table`` and from Python, naming the group and the term.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from marl_ppo import RewardTable, RewardTableError, own, signal, team
from marl_ppo.cli import main

BAD = [
    # (overrides, words the message must hold)
    (["train.frames_per_batch=401"], ["train.frames_per_batch=401", "multiple of env.num_envs=60", "360", "420"]),
    (["train.minibatch_size=7000"], ["train.minibatch_size=7000", "frames_per_batch=6000", "<="]),
    (["model.hidden=[0]"], ["model.hidden", "[0]", ">= 1"]),
    (["model.hidden=[]"], ["model.hidden", "[]", "one or more"]),
    (["loss.gamma=5"], ["loss.gamma", "[0, 1]", "5.0"]),
    (["loss.lmbda=1.5"], ["loss.lmbda", "[0, 1]", "1.5"]),
    (["loss.lmbda=-0.1"], ["loss.lmbda", "[0, 1]", "-0.1"]),
    (["loss.clip_epsilon=-1"], ["loss.clip_epsilon", "> 0", "-1.0"]),
    (["log.eval_every=-1"], ["log.eval_every", ">= 0", "-1"]),
    (["log.checkpoint_every=-2"], ["log.checkpoint_every", ">= 0", "-2"]),
    (["env.max_steps=0"], ["env.max_steps", ">= 1", "0"]),
    (["train.lr=0"], ["train.lr", "> 0", "0.0"]),
    (["train.lr=-0.001"], ["train.lr", "> 0", "-0.001"]),
    (["train.device=gpu"], ["train.device", "'gpu'", "'cpu' or 'cuda'"]),
    (
        ["env.multidiscrete_actions=true"],
        ["env.multidiscrete_actions=true", "env.continuous_actions=true", "env.continuous_actions=false"],
    ),
    (
        ["env.num_envs=600"],
        ["log.checkpoint_every=5", "10 steps per env", "env.max_steps=100", "log.checkpoint_every >= 10"],
    ),
    (
        ["env.kind=pettingzoo", "env.scenario=simple_spread_v3", "env.comm=true"],
        ["env.comm=true", "VMAS option", "'pettingzoo'"],
    ),
    (
        [
            "env.kind=pettingzoo",
            "env.scenario=simple_spread_v3",
            "env.continuous_actions=false",
            "env.multidiscrete_actions=true",
        ],
        ["env.multidiscrete_actions=true", "VMAS option"],
    ),
    (
        ["env.kind=custom", "env.factory=tests/envs/custom_envs.py:make_depot", "env.kwargs={}", "log.video=true"],
        ["log.video=true", "env.kind='custom' does not render", "'vmas'", "'pettingzoo'", "'mamujoco'"],
    ),
    (
        ["env.kind=pettingzoo", "env.scenario=simple_spread_v3", "env.parallel=true", "log.video=true"],
        ["log.video=true", "env.parallel=true", "worker processes", "env.parallel=false"],
    ),
    (["env.kind=pettingzoo", "env.scenario=simple_spread_v3", "env.device=cuda:0"], ["env.device", "CPU only"]),
    (["log.wandb.mode=cloud"], ["log.wandb.mode", "'online', 'offline', 'disabled'", "'cloud'"]),
    (
        ["train.collector.backend=process", "train.collector.num_collectors=7"],
        ["env.num_envs (60) must be divisible by train.collector.num_collectors (7)"],
    ),
    (["reward_table={agents: [{own: abc}]}"], ["reward_table", "group 'agents'", "own()", "'abc'", "finite number"]),
    (["reward_table={agents: [{own: '0.5'}]}"], ["group 'agents'", "'0.5'", "(str)"]),
    (["reward_table={agents: [{own: true}]}"], ["group 'agents'", "True", "(bool)"]),
    (["reward_table={agents: [{team: null}]}"], ["group 'agents'", "team()", "None"]),
    (["reward_table={agents: null}"], ["group 'agents'", "empty (null)"]),
    (["reward_table={agents: [{key: 5}]}"], ["group 'agents'", "a key must be a string", "5"]),
    (["model.kind=rnn"], ["model.kind", "'mlp', 'gru', 'lstm'", "'rnn'"]),
    (["model.critic=team"], ["model.critic", "'group', 'global'", "'team'"]),
    (["model.critic_kind=transformer"], ["model.critic_kind", "'transformer'", "'cnn'"]),
    (["model.kind=cnn"], ["group 'agents': model kind 'cnn' reads one image per agent", "model.kind=mlp"]),
    (["model.options.cnn.depth=2"], ["model.options.cnn: unknown option 'depth'", "'channels'"]),
    (["model.options.deepsets.phi=8"], ["model.options.deepsets.phi must be of the type of its default [64]"]),
    (["model.rnn_hidden=0"], ["model.rnn_hidden", ">= 1", "0"]),
    (["model.seq_len=0"], ["model.seq_len", ">= 1", "0"]),
    (["model.groups={agents: {depth: 3}}"], ["model.groups.agents", "['depth']", "'kind'", "'rnn_hidden'"]),
    (["model.groups={agents: {kind: rnn}}"], ["model.groups.agents.kind", "'rnn'"]),
    (["model.critic=global", "model.critic_kind=gru"], ["model.critic_kind='gru'", "model.critic=global", "MLP"]),
    (["model.kind=gru", "model.seq_len=30"], ["model.seq_len=30", "100 steps"]),
    (["loss.value_norm=batch"], ["loss.value_norm", "'none', 'running', 'popart'", "'batch'"]),
    (["loss.popart_beta=1.0"], ["loss.popart_beta", "(0, 1)", "1.0"]),
    (["env.time_limit=truncated"], ["env.time_limit", "'truncate', 'terminate'", "'truncated'"]),
    (["loss.clip_epsilon=5"], ["loss.clip_epsilon", "< 1", "5.0"]),
    (["loss.clip_epsilon=1"], ["loss.clip_epsilon", "< 1", "1.0"]),
    (["loss.entropy_coeff=-1"], ["loss.entropy_coeff", ">= 0", "-1.0"]),
    (["loss.critic_coeff=-1"], ["loss.critic_coeff", ">= 0", "-1.0"]),
    (["loss.entropy_final_scale=2"], ["loss.entropy_final_scale", "[0, 1]", "2.0"]),
    (["loss.entropy_final_scale=-0.5"], ["loss.entropy_final_scale", "[0, 1]", "-0.5"]),
    (["loss.head_entropy_coeff.move=-1"], ["loss.head_entropy_coeff.move", ">= 0", "-1.0"]),
    (["loss.head_entropy_coeff={agents:move: -1}"], ["loss.head_entropy_coeff.agents:move", ">= 0", "-1.0"]),
    (["loss.group_weights={agents: -1}"], ["loss.group_weights.agents", ">= 0", "-1.0"]),
    (["train.max_grad_norm=0"], ["train.max_grad_norm", "> 0", "0.0"]),
    (["train.max_grad_norm=-1"], ["train.max_grad_norm", "> 0", "-1.0"]),
    (["balanse"], ["config 'balanse' does not exist", "shipped config", "did you mean 'balance'"]),
    (["train.seed=-1"], ["train.seed", "[0, 2**31 - 1]", "-1"]),
    (["train.seed=2147483648"], ["train.seed", "0 to 2147483647", "2147483648"]),
    (["model.hidden=64"], ["model.hidden", "expected a list, e.g. model.hidden=[256, 256]"]),
    (["env.kwargs={horizon:10}"], ["env.kwargs", "'horizon:10'", "space after the colon", "{horizon: 10}"]),
    (["env.kwargs={n_agents: -3}"], ["VMAS scenario 'navigation'", "env.kwargs={'n_agents': -3}", "AssertionError"]),
    # a CLI dict is merged into the config's: the typo is refused, not carried along beside n_agents
    (
        ["env.kwargs={n_agentz: 3}"],
        ["env.kwargs ['n_agentz']", "VMAS scenario 'navigation'", "did you mean 'n_agents'"],
    ),
    (
        ["env.kind=pettingzoo", "env.scenario=simple_spread_v3", "env.num_envs=2", "env.kwargs={NN: 3}"],
        ["env.kwargs ['NN']", "PettingZoo task 'simple_spread_v3'", "did you mean 'N'"],
    ),
    # any other PettingZoo env: the parameters of the class its **kwargs reach
    (
        ["env.kind=pettingzoo", "env.scenario=pettingzoo.sisl.pursuit_v5", "env.kwargs={n_pursuer: 2}"],
        ["env.kwargs ['n_pursuer']", "'pettingzoo.sisl.pursuit_v5'", "did you mean 'n_pursuers'", "'x_size'"],
    ),
    (
        ["env.kind=pettingzoo", "env.scenario=sisl/pursuit-v5", "env.kwargs={n_pursuer: 2}"],
        ["env.kwargs ['n_pursuer']", "'sisl/pursuit-v5'", "did you mean 'n_pursuers'"],
    ),
    (
        ["env.kind=pettingzoo", "env.scenario=tictactoe_v3", "env.kwargs={screen_heigth: 2}"],
        ["env.kwargs ['screen_heigth']", "'tictactoe_v3'", "did you mean 'screen_height'"],
    ),
    (
        ["env.kind=pettingzoo", "env.scenario=pettingzoo.sisl.pursuit_v5", "env.kwargs={n_pursuers: -1}"],
        ["pettingzoo.sisl.pursuit_v5.parallel_env", "env.kwargs={'n_pursuers': -1}", "failed: IndexError"],
    ),
]
TTT = ["env.kind=pettingzoo", "env.scenario=tictactoe_v3", "env.continuous_actions=false", "env.num_envs=2"]
BAD += [  # opponents: a group that does not exist, a source that cannot be built or cannot play the seat
    ([*TTT, "opponents.nope=random"], ["opponents names group(s) ['nope']", "['player_1', 'player_2']"]),
    ([*TTT, "opponents.player_2=randm"], ["opponents.player_2", "'randm'", "did you mean 'random'"]),
    ([*TTT, "opponents.player_2=no_such_module_xyz:act"], ["opponents.player_2", "cannot import module"]),
    ([*TTT, "opponents.player_2=checkpoint:/no/such/run"], ["opponents.player_2", "not a run directory"]),
    ([*TTT, "opponents.player_2=self:player_3"], ["opponents.player_2", "self:player_3", "['player_1']"]),
    ([*TTT, "opponents.player_1=random", "opponents.player_2=random"], ["no group is left to train"]),
    (["log.eval_opponents=[self]"], ["log.eval_opponents[0]", "'self' is how a group trains"]),
    (["log.eval_opponents=[pool]"], ["log.eval_opponents[0]", "'pool'", "no pool seat"]),
    (
        [*TTT, "opponents.player_2=pool:player_1", "pool.fixed=[pool]", "pool.fixed_share=0.2"],
        ["pool.fixed[0]", "'pool' is not a fixed player", "random, module:callable or checkpoint"],
    ),
    (
        [*TTT, "opponents.player_2=pool:player_1", "pool.fixed=[no_such_module_xyz:act]", "pool.fixed_share=0.2"],
        ["pool.fixed[0]", "cannot import module"],
    ),
    ([*TTT, "pool.fixed_share=0.3"], ["pool.fixed_share=0.3 needs players in pool.fixed"]),
    (
        [*TTT, "opponents.player_2=pool:player_1", "train.collector.backend=process"],
        ["opponents.player_2", "train.collector.backend=process", "backend=direct"],
    ),
    (
        ["env.scenario=simple_tag", "opponents.agent=self"],
        ["opponents.agent", "'self' needs a training group with identical specs", "agents 1 (group 'agent')"],
    ),
]
if not torch.cuda.is_available():
    BAD += [
        (["train.device=cuda"], ["train.device='cuda'", "no CUDA device", "train.device=cpu"]),
        (["env.device=cuda"], ["env.device='cuda'", "no CUDA device", "env.device=cpu"]),
    ]


@pytest.mark.parametrize("overrides, words", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_value_is_refused_before_a_run_directory_exists(tmp_path, capsys, overrides, words):
    assert main(["train", *overrides, f"log.root={tmp_path / 'runs'}", "log.progress=false"]) == 1
    err = capsys.readouterr().err
    assert "ConfigError" in err, err
    for word in words:
        assert word in err, f"{word!r} not in {err!r}"
    assert not (tmp_path / "runs").exists(), "a refused config created a run directory"


def test_a_classic_games_unknown_kwarg_names_its_own_parameters_whatever_else_is_loaded(tmp_path, capsys):
    """Several classic games name their class ``raw_env``: the hint reads the refusing game's own."""
    import importlib

    for other in ("go_v5", "connect_four_v3", "rps_v2"):
        importlib.import_module(f"pettingzoo.classic.{other}")
    overrides = ["env.kind=pettingzoo", "env.scenario=tictactoe_v3", "env.kwargs={screen_heigth: 2}"]
    assert main(["train", *overrides, f"log.root={tmp_path / 'runs'}", "log.progress=false"]) == 1
    err = capsys.readouterr().err
    assert "did you mean 'screen_height'" in err and "screen_scaling" not in err, err


def test_the_default_configs_pass_the_checks():
    from marl_ppo.config import load_config

    configs = Path(__file__).resolve().parents[2] / "configs"
    for path in [*sorted(configs.glob("*.yaml")), *sorted((configs / "tuned").glob("*.yaml"))]:
        load_config(path)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: own("0.5"), ["own()", "'0.5'", "(str)"]),
        (lambda: own(True), ["own()", "True", "(bool)"]),
        (lambda: team(["a"], weight="abc"), ["team(['a'])", "'abc'"]),
        (lambda: team(None), ["team()", "None"]),
        (lambda: signal(5), ["a key must be a string", "5"]),
        (lambda: RewardTable({"a": [1.0]}), ["group 'a'", "a reward term must be a mapping", "1.0"]),
        (lambda: RewardTable({"a": None}), ["group 'a'", "empty (null)"]),
    ],
)
def test_reward_terms_from_python_name_what_is_wrong(make, words):
    with pytest.raises(RewardTableError) as info:
        make()
    for word in words:
        assert word in str(info.value)


def test_python_and_dict_forms_accept_the_same_rows():
    assert RewardTable({"a": "own"}) == RewardTable.from_dict({"a": "own"}) == RewardTable({"a": [own(1.0)]})
    assert RewardTable({"a": [{"own": 0.5}]}) == RewardTable.from_dict({"a": [{"own": 0.5}]})


def test_a_refused_config_is_refused_before_torch_is_loaded():
    """Config errors come before the heavy imports (torch, torchrl, the envs): in well under a second."""
    import subprocess
    import sys

    code = (
        "import sys; from marl_ppo.cli import main; rc = main(['train', 'loss.gamma=5']); "
        "assert rc == 1, rc; assert 'torch' not in sys.modules, 'torch was imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "ConfigError" in proc.stderr and "loss.gamma" in proc.stderr


@pytest.mark.parametrize(
    "text, words",
    [
        ("- a\n- b\n", ["holds a list", "not a mapping of sections such as env:"]),
        ("name: s\ntasks: [navigation.yaml]\nseeds: [0]\n", ["is a suite file", "marl-ppo suite"]),
    ],
    ids=["a list", "a suite file"],
)
def test_a_file_that_is_not_a_train_config_is_refused_in_one_line(tmp_path, capsys, text, words):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    assert main(["train", str(path), f"log.root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err
    assert "ConfigError" in err and all(w in err for w in words), err
    assert not (tmp_path / "runs").exists()


SUITE = Path(__file__).resolve().parents[2] / "configs" / "suites" / "tiny.yaml"


def _read_only_dir(tmp_path: Path) -> Path:
    """A folder this process cannot write in: read-only by mode, or (as root, whom modes do not stop) a file's child."""
    if os.geteuid() != 0:
        folder = tmp_path / "read_only"
        folder.mkdir(mode=0o555)
        return folder / "suite"
    (tmp_path / "a_file").write_text("")
    return tmp_path / "a_file" / "suite"


@pytest.mark.parametrize(
    "case, words",
    [
        ("read-only --out", ["cannot write the suite's results in", "choose a writable folder with --out"]),
        (
            "slurm without SLURM",
            ["found no SLURM here", "no 'srun' on PATH", "slurm: {cluster: local}", "as local processes"],
        ),
    ],
)
def test_a_suite_that_cannot_run_here_is_refused_before_a_run_directory_exists(
    tmp_path, capsys, monkeypatch, case, words
):
    from marl_ppo.suite import main as suite_main

    if case == "read-only --out":
        out, args = _read_only_dir(tmp_path), []
    else:
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # a machine without srun
        out, args = tmp_path / "suite", ["--launcher", "slurm"]
    assert suite_main([str(SUITE), "--out", str(out), *args], prog="marl-ppo suite") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err
    assert not out.exists(), f"{out} was left behind"


@pytest.mark.parametrize(
    "override, package, extra",
    [
        ("log.loggers=[csv,wandb]", "wandb", "loggers"),
        ("log.loggers=[csv,mlflow]", "mlflow", "loggers"),
        ("log.loggers=[tensorboard]", "tensorboard", "loggers"),
        ("train.collector.backend=ray", "ray", "cluster"),
    ],
)
def test_a_missing_optional_package_names_the_extra_that_installs_it(tmp_path, override, package, extra):
    """In a process where ``package`` cannot be imported: one line naming the option, the package and
    ``pip install 'marl-ppo[extra]'``, before torch is loaded and before any run directory exists."""
    import subprocess
    import sys

    args = ["train", override, f"log.root={tmp_path / 'runs'}"]
    code = (
        f"import sys; sys.modules[{package!r}] = None; from marl_ppo.cli import main; rc = main({args!r}); "
        "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for word in (override.partition("=")[0], repr(package), f"pip install 'marl-ppo[{extra}]'"):
        assert word in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "command, launcher, package",
    [("suite", "ray", "ray"), ("train -m", "ray", "ray"), ("suite", "slurm", "submitit")],
)
def test_a_launcher_whose_package_is_missing_names_the_extra_before_a_run_directory_exists(
    tmp_path, command, launcher, package
):
    """``--launcher ray|slurm`` in a process where its package cannot be imported: one line naming the
    launcher, the package and ``pip install 'marl-ppo[cluster]'``; nothing is planned into ``--out``."""
    import subprocess
    import sys

    out = tmp_path / "out"
    first = ["suite", str(SUITE)] if command == "suite" else ["train", "-m", "train.seed=0,1"]
    args = [*first, "--out", str(out), "--launcher", launcher]
    code = f"import sys; sys.modules[{package!r}] = None; from marl_ppo.cli import main; sys.exit(main({args!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in (f"--launcher {launcher}", repr(package), "pip install 'marl-ppo[cluster]'"):
        assert word in proc.stderr, proc.stderr
    assert not out.exists(), f"{sorted(out.rglob('*'))} left behind"
