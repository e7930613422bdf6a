"""The examples run as written, at tiny sizes, and show what they claim.

* ``deploy_onnx.py``: the ONNX export's return in VMAS and in a PettingZoo MPE game (onnxruntime and
  numpy in the policy's path) equals ``marl-ppo eval``'s, on the text line docs/deploy.md shows (MaMuJoCo:
  on 50-step episodes, its physics being chaotic); a run with opponents is refused in one line;
* each script in ``examples/`` runs as a subprocess with ``--tiny --out TMP --threads 1`` and
  exits 0; its output and run directory hold the thing it demonstrates (the team term of the
  reward table, per-head entropy keys, the PettingZoo group's own done, the custom env's routed
  team bonus and return curve, checkpoints);
* ``examples/notebooks/research.ipynb`` is stored without outputs and executes top to bottom
  with nbclient (``MARL_PPO_NOTEBOOK_TINY=1``, a kernel on this interpreter), producing its
  plots inline and the comparison PNG.

About 30 s on 2 CPU cores (most of it importing torch/torchrl/vmas in each subprocess).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # whole runs, subprocesses and clusters

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run_example(script: str, out: Path, *extra: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--tiny", "--out", str(out), "--threads", "1", *extra],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, (
        f"{script} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def only_run_dir(out: Path) -> Path:
    dirs = [p for p in out.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_simple_tag_team_reward(tmp_path):
    stdout = run_example("simple_tag_team_reward.py", tmp_path)
    # the resolved table: the adversaries' team mean, and the agent's zero-sum term
    assert "adversary  [3 agents]  reward <- 1 × mean(adversary reward)" in stdout
    assert "agent      [1 agents]  reward <- 1 × own reward (agent.reward) + -1 × mean(adversary reward)" in stdout
    run = only_run_dir(tmp_path)
    assert (run / "checkpoints" / "last.pt").is_file()
    assert "-1 × mean(adversary reward)" in (run / "reward_table.txt").read_text()
    summary = json.loads((run / "summary.json").read_text())
    returns = stdout.split("per-group returns", 1)[1].splitlines()
    for group in ("adversary", "agent"):
        assert math.isfinite(summary[f"eval/{group}/episode_reward"])
        row = next(line.split() for line in returns if line.strip().startswith(group + " "))
        assert len(row) == 4 and all(math.isfinite(float(v)) for v in row[1:]), row  # first, last, eval
        assert float(row[3]) == pytest.approx(summary[f"eval/{group}/episode_reward"], abs=1e-3)


@pytest.mark.parametrize("scenario, group", [(None, "agents"), ("simple_spread_v3", "agent")], ids=["vmas", "mpe"])
def test_deploy_onnx_returns_what_marl_ppo_eval_returns(tmp_path, scenario, group):
    extra = ["--scenario", scenario] if scenario else []
    stdout = run_example("deploy_onnx.py", tmp_path, "--episodes", "4", *extra)
    line = stdout.strip().splitlines()[-1]  # "agents: onnxruntime return 2.722494, marl-ppo eval return 2.722494"
    name, rest = line.split(": onnxruntime return ")
    deployed, evaluated = (float(v) for v in rest.split(", marl-ppo eval return "))
    # the same episodes played by onnxruntime (no torch in the policy's path) and by marl-ppo eval
    assert name == group and deployed == pytest.approx(evaluated, abs=1e-4)
    assert (only_run_dir(tmp_path) / "export" / group / "policy.onnx").is_file()


def test_deploy_onnx_matches_marl_ppo_eval_in_mamujoco_on_short_episodes(tmp_path):
    pytest.importorskip("gymnasium_robotics")
    # MaMuJoCo is chaotic: onnxruntime's ~1e-7 float differences from torch grow over hundreds of steps, so the
    # example compares 50-step episodes, which stay together (a 1 000-step trained one differed by 400)
    args = ("--config", "halfcheetah_2x3_mappo", "--max-steps", "50", "--episodes", "2")
    line = run_example("deploy_onnx.py", tmp_path, *args).strip().splitlines()[-1]
    name, rest = line.split(": onnxruntime return ")
    deployed, evaluated = (float(v) for v in rest.split(", marl-ppo eval return "))
    assert name == "agent" and deployed == pytest.approx(evaluated, rel=1e-4, abs=1e-3)


def test_deploy_onnx_refuses_a_run_with_opponents(tmp_path):
    # a seat played by marl_ppo's random player: its draws are torch's, which the example does not replay
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("env: {kind: pettingzoo}\nopponents: {blue: random}\n")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "deploy_onnx.py"), str(tmp_path / "run")], capture_output=True, text=True
    )
    assert proc.returncode == 1 and "opponents.blue: random" in proc.stderr, proc.stderr
    assert "marl_ppo's own player" in proc.stderr and not (tmp_path / "run" / "export").exists()


def test_hybrid_comm_prints_per_head_entropies(tmp_path):
    stdout = run_example("hybrid_comm.py", tmp_path, "--comm-entropy", "0.05")
    assert "action heads move (StableTanhNormal), comm (Categorical)" in stdout
    for head in ("move", "comm"):
        for name in ("entropy", "entropy_coeff", "kl_approx"):
            assert f"train/agents/{head}/{name} " in stdout, (head, name)
    # the per-head coefficients came through from the command line (linear schedule from 0.05)
    coeff = next(line for line in stdout.splitlines() if "train/agents/comm/entropy_coeff" in line)
    assert float(coeff.split()[1]) == pytest.approx(0.05)
    run = only_run_dir(tmp_path)
    assert (run / "checkpoints" / "last.pt").is_file()
    assert (run / "logs" / "scalars" / "train" / "agents" / "comm" / "entropy.csv").is_file()


def test_pettingzoo_simple_spread(tmp_path):
    stdout = run_example("pettingzoo_simple_spread.py", tmp_path)
    assert "env: pettingzoo simple_spread_v3" in stdout
    assert "groups: {'agent': ['agent_0', 'agent_1', 'agent_2']}" in stdout
    assert "done   <- own done (agent.done)" in stdout
    assert "agent: final deterministic evaluation" in stdout
    run = only_run_dir(tmp_path)
    assert (run / "checkpoints" / "last.pt").is_file()
    assert "simple_spread_v3" in (run / "config.yaml").read_text()


def test_custom_dict_env(tmp_path):
    source = (EXAMPLES / "custom_dict_env.py").read_text()
    assert "class CargoCrewEnv(EnvBase)" in source and "toy_env" not in source  # its own env
    assert "Trainer(cfg, env_fn=make_cargo_crew)" in source  # trained through the Trainer
    stdout = run_example("custom_dict_env.py", tmp_path)
    assert "action heads move: BoundedContinuous[2, 2], pick: Categorical[2]" in stdout
    assert "reward <- 1 × own reward (crew.reward) + 0.5 × team_bonus" in stdout
    assert "return: first" in stdout and "evaluation over 16 episodes" in stdout
    run = only_run_dir(tmp_path)
    result = json.loads((run / "returns.json").read_text())
    assert len(result["returns"]) == 4 and all(math.isfinite(r) for r in result["returns"])
    assert (run / "checkpoints" / "last.pt").is_file() and (run / "plots").is_dir()
    assert f"{EXAMPLES / 'custom_dict_env.py'}:make_cargo_crew" in (run / "config.yaml").read_text()
    # the run directory alone rebuilds the env: marl-ppo eval imports the example's factory by file path
    proc = subprocess.run(
        [sys.executable, "-m", "marl_ppo.cli", "eval", str(run), "--episodes", "3"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["episodes"] == 3


def test_pettingzoo_knights_archers_zombies(tmp_path):
    stdout = run_example("pettingzoo_knights_archers_zombies.py", tmp_path)
    assert "env.scenario: pettingzoo.butterfly.knights_archers_zombies_v11" in stdout
    assert "groups: archer ['archer_0', 'archer_1'], knight ['knight_0', 'knight_1']" in stdout
    left = next(line for line in stdout.splitlines() if line.startswith("agent-steps after leaving"))
    assert float(left.split()[-1].rstrip("%")) > 0  # agents died, and their steps were masked
    run = only_run_dir(tmp_path)
    assert (run / "checkpoints" / "last.pt").is_file()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["eval/episodes"] == 4 and math.isfinite(summary["eval/archer/episode_reward"])


# -- the notebook ----------------------------------------------------------------------------------------

NOTEBOOK = EXAMPLES / "notebooks" / "research.ipynb"


def test_notebook_is_stored_clean():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, "commit the notebook without outputs"
    # one parameter cell sets every size, and reads the tiny switch
    params = next(c.source for c in nb.cells if c.cell_type == "code")
    assert "FRAMES =" in params and "MARL_PPO_NOTEBOOK_TINY" in params


def test_notebook_executes(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    # A kernel spec on this very interpreter (the venv), independent of the user's Jupyter set-up.
    spec_dir = tmp_path / "kernels" / "marl-ppo-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "marl_ppo test",
                "language": "python",
            }
        )
    )
    out = tmp_path / "runs"
    monkeypatch.setenv("MARL_PPO_NOTEBOOK_TINY", "1")
    monkeypatch.setenv("MARL_PPO_NOTEBOOK_OUT", str(out))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    km = KernelManager(
        kernel_name="marl-ppo-test", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    )

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, km=km, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(o.output_type != "error" for c in code for o in c.outputs)
    text = "\n".join(o.get("text", "") for c in code for o in c.outputs if o.output_type == "stream")
    assert "80 frames per run, 2 iterations" in text  # the tiny switch reached the parameter cell
    assert "alice: 1 agent(s)" in text and "action heads  move: StableTanhNormal, comm: Categorical" in text
    assert "-0.5 × mean(alice, bob reward)" in text  # the changed table, printed
    images = [i for i, c in enumerate(code) if any("image/png" in o.get("data", {}) for o in c.outputs)]
    assert len(images) >= 2, "per-group return / per-head entropy plot and the comparison plot"
    assert images[-1] >= len(code) - 2, "the comparison plot is in the last cells"
    png = out / "compare_returns.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"crypto-own", "crypto-eve-team"}
    for run in ("crypto-own", "crypto-eve-team"):
        assert (out / run / "checkpoints" / "last.pt").is_file()
