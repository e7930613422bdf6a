"""The package as people install it: wheel and sdist, shipped configs, version, a discoverable CLI, extras.

* the wheel built from this tree, and the wheel built from its sdist, hold the same files, the
  configs among them; installed into a fresh venv outside the checkout (its dependencies taken
  from this environment: no second torch download), ``marl-ppo train balance`` trains from the
  shipped config by name and ``marl-ppo eval`` evaluates the run;
* ``marl-ppo --version`` is the package metadata's version; ``python -m marl_ppo`` is the CLI;
* ``marl-ppo list`` prints what VMAS, mpe2 and PettingZoo's registry hold (read from them here);
* ``--print-config`` round-trips and ``--dry-run`` builds everything and writes nothing;
* what ``make train`` installs (torch, then marl_ppo without extras), as pip resolves it, holds none of
  the extras' packages.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from marl_ppo.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "env.num_envs=4",
    "env.max_steps=10",
    "train.frames_per_batch=40",
    "train.minibatch_size=40",
    "train.total_frames=80",
    "train.num_epochs=1",
    "model.hidden=[16]",
    "log.eval_every=0",
    "log.eval_episodes=2",
    "log.progress=false",
    "log.plot=false",
]


def _run(cmd: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def _wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if ".dist-info/RECORD" not in n}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """The sdist, the wheel built from it (``python -m build``'s default) and a wheel built from the tree."""
    out = tmp_path_factory.mktemp("dist")
    build = [sys.executable, "-m", "build", "--no-isolation"]  # this venv's setuptools: nothing downloaded
    _run([*build, "--outdir", str(out / "from_sdist"), str(ROOT)], cwd=ROOT)
    _run([*build, "--wheel", "--outdir", str(out / "from_tree"), str(ROOT)], cwd=ROOT)
    (sdist,) = (out / "from_sdist").glob("*.tar.gz")
    (from_sdist,) = (out / "from_sdist").glob("*.whl")
    (from_tree,) = (out / "from_tree").glob("*.whl")
    return {"sdist": sdist, "from_sdist": from_sdist, "from_tree": from_tree}


@pytest.mark.slow
def test_the_sdist_builds_the_same_wheel_and_both_ship_the_configs(wheels):
    files = _wheel_files(wheels["from_tree"])
    assert files == _wheel_files(wheels["from_sdist"])
    # every YAML under marl_ppo/configs: configs, suites, tune files, tuned configs
    shipped = {p.relative_to(ROOT).as_posix() for p in (ROOT / "marl_ppo" / "configs").rglob("*.yaml")}
    assert {"marl_ppo/configs/tuned/navigation.yaml", "marl_ppo/configs/tune/tiny.yaml"} <= shipped
    assert shipped and shipped <= files
    assert not any(f.startswith(("tests/", "docs/", "examples/")) for f in files)
    meta = zipfile.ZipFile(wheels["from_tree"]).read(f"marl_ppo-{_version()}.dist-info/METADATA").decode()
    assert "License-Expression: MIT" in meta and f"Version: {_version()}" in meta


@pytest.mark.slow
def test_the_wheel_installed_outside_the_checkout_trains_a_shipped_config_by_name(wheels, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    target = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=tmp_path)
    site = Path(target.stdout.strip())
    # the wheel alone (this venv's pip, targeting the new one); then this environment's packages behind it
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheels["from_tree"])],
        cwd=tmp_path,
    )
    (site / "deps_from_the_test_venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    where = _run([str(python), "-c", "import marl_ppo; print(marl_ppo.__file__)"], cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout  # not this checkout
    cli = venv / "bin" / "marl-ppo"
    _run([str(cli), "train", "balance", *TINY, f"log.root={tmp_path / 'runs'}"], cwd=tmp_path)
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name == "balance-mappo-seed0"
    assert json.loads((run / "summary.json").read_text())["frames"] == 80
    out = _run([str(cli), "eval", str(run), "--episodes", "2"], cwd=tmp_path)
    assert json.loads(out.stdout)["episodes"] == 2
    suites = _run([str(cli), "suite", "tiny", "--dry-run", "--out", str(tmp_path / "suite")], cwd=tmp_path)
    assert "vmas/navigation/mappo/seed_0" in suites.stdout


def _version() -> str:
    return importlib.metadata.version("marl-ppo")


def test_version_is_the_package_metadatas(capsys):
    import marl_ppo

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"marl-ppo {_version()}" == f"marl-ppo {marl_ppo.__version__}"
    proc = subprocess.run([sys.executable, "-m", "marl_ppo", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == f"marl-ppo {_version()}"


def _listed(capsys, what: str) -> str:
    assert main(["list", what]) == 0
    return capsys.readouterr().out


def test_list_shows_what_vmas_and_pettingzoo_hold_here(capsys):
    import importlib

    import mpe2
    import pettingzoo
    import vmas

    scenarios = _listed(capsys, "scenarios").splitlines()[1].split()
    assert set(scenarios) == set(vmas.scenarios) | set(vmas.mpe_scenarios) | set(vmas.debug_scenarios)
    text = _listed(capsys, "pettingzoo")
    lines = text.splitlines()
    mpe = lines[lines.index(next(ln for ln in lines if ln.startswith("PettingZoo MPE"))) + 1].split()
    import pkgutil

    assert set(mpe) == {m.name for m in pkgutil.iter_modules(mpe2.__path__) if m.name.startswith("simple")}
    rows = {ln.split()[0]: ln for ln in lines if ln.startswith("  ") and "/" in ln.split()[0]}
    registry = {**pettingzoo.aec_registry, **pettingzoo.parallel_registry}
    assert set(rows) == set(registry)
    for env_id, spec in registry.items():
        try:
            importlib.import_module(spec.entry_point.partition(":")[0])
            imports = True
        except ImportError:
            imports = False
        assert ("needs " in rows[env_id]) == (not imports), rows[env_id]
        if not imports:
            assert f"pip install 'pettingzoo[{spec.namespace}]'" in rows[env_id]


def test_list_shows_the_shipped_configs_and_suites(capsys):
    text = _listed(capsys, "all")
    for path in (ROOT / "marl_ppo" / "configs").glob("*.yaml"):
        assert re.search(rf"^  {path.stem} +\S", text, re.M), path.stem
    for path in (ROOT / "marl_ppo" / "configs" / "suites").glob("*.yaml"):
        assert re.search(rf"^  {path.stem} +\S", text, re.M), path.stem
    for path in (ROOT / "marl_ppo" / "configs" / "tuned").glob("*.yaml"):
        assert re.search(rf"^  tuned/{path.stem} +\S", text, re.M), path.stem
    assert main(["train", "tuned/navigation", "--print-config"]) == 0
    assert "lr: 0.0028" in capsys.readouterr().out


def test_print_config_round_trips(tmp_path, capsys):
    from marl_ppo.config import load_config

    assert main(["train", "simple_tag", "train.lr=1e-3", "env.kwargs.num_good_agents=2", "--print-config"]) == 0
    printed = capsys.readouterr().out
    saved = tmp_path / "printed.yaml"
    saved.write_text(printed)
    assert load_config(saved) == load_config("simple_tag", ["train.lr=1e-3", "env.kwargs.num_good_agents=2"])
    assert main(["train", str(saved), "--print-config"]) == 0
    assert capsys.readouterr().out == printed
    # trained from the printed file, the run records the same resolved config
    root = tmp_path / "runs"
    assert main(["train", str(saved), *TINY, f"log.root={root}"]) == 0
    (run,) = root.iterdir()
    assert load_config(run / "config.yaml") == load_config(saved, [*TINY, f"log.root={root}"])


def test_dry_run_builds_everything_and_writes_nothing(tmp_path, capsys, monkeypatch):
    from marl_ppo.config import load_config
    from marl_ppo.run.build import build

    monkeypatch.chdir(tmp_path)
    assert main(["train", "simple_tag", "model.hidden=[16]", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
    assert "reward table" in out and "0.5 × own reward (adversary.reward)" in out
    parts = build(load_config("simple_tag", ["model.hidden=[16]"]))
    total = sum(p.numel() for p in parts.router.parameters())
    assert f"all groups: {total:,} trainable parameters" in out
    for group, loss in parts.router.losses.items():
        actor = sum(p.numel() for p in loss.actor_network.parameters())
        assert f"group {group}: {parts.groups[group].n_agents} agent(s), actor {actor:,} parameters" in out


# what only the extras bring (their own names and what they are known by), none of which `make train` may install
EXTRAS_ONLY = {
    "tensorboard", "wandb", "mlflow", "mlflow-skinny", "ray", "submitit", "optuna", "mkdocs", "mkdocs-material",
    "mkdocstrings", "pytest", "ruff", "nbclient", "nbformat", "ipykernel", "jupyter", "jupyter-client", "build",
    "open-spiel", "shimmy", "gymnasium-robotics", "mujoco",
}  # fmt: skip


def test_make_train_installs_none_of_the_extras(tmp_path):
    """What ``make train`` installs, as pip resolves it into an empty environment (``--dry-run
    --ignore-installed --report``, with the index pip is configured with): ``$(TORCH)`` then ``-e .``
    hold torch, torchrl, tensordict, vmas, pettingzoo and mpe2, and none of the extras' packages."""
    import tomllib
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    makefile = (ROOT / "Makefile").read_text()
    train_install = re.search(r"^\$\(VENV\)/\.installed:.*?(?=^\S)", makefile, re.M | re.S).group(0)
    assert re.search(r"^\t\$\(PIP\) install (?:-q )?\$\(TORCH\)", train_install, re.M), train_install
    assert re.search(r"^\t\$\(PIP\) install (?:-q )?-e \.$", train_install, re.M), train_install
    torch_req = re.search(r"^TORCH \?= (\S+)$", makefile, re.M).group(1)
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-build-isolation"]
        + ["--quiet", "--report", str(report), torch_req, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"pip could not resolve the base install:\n{proc.stderr[-4000:]}"
    resolved = {canonicalize_name(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]}
    assert {"marl-ppo", "torch", "torchrl", "tensordict", "vmas", "pettingzoo", "mpe2"} <= resolved, sorted(resolved)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    direct = {canonicalize_name(Requirement(r).name) for reqs in extras.values() for r in reqs} - {"marl-ppo"}
    assert direct and not (resolved & (direct | EXTRAS_ONLY)), sorted(resolved & (direct | EXTRAS_ONLY))


def test_the_changelog_and_citation_name_this_version():
    import yaml

    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["version"] == _version()
    releases = re.findall(r"^## \[(\d[^\]]*)\] - (\d{4}-\d{2}-\d{2})$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert releases[0] == (_version(), citation["date-released"]), releases


def test_a_notebook_runs_the_loop_by_hand_from_the_package_alone():
    """``from marl_ppo import ...``: a config, its parts and training state, a batch, advantages, the update."""
    import torch

    from marl_ppo import TrainState, build, load_config, ppo_update, train_state

    cfg = load_config(overrides=["env.num_envs=4", "env.max_steps=10", "env.kwargs.n_agents=2", "model.hidden=[16]"])
    parts = build(cfg)
    state = train_state(cfg, parts)
    assert isinstance(state, TrainState)
    with torch.no_grad():
        batch = parts.reward_table(parts.env.rollout(10, parts.policy, break_when_any_done=False))
    parts.env.close()
    batch = state.stack.compute_advantages(batch)
    before = [p.detach().clone() for p in state.stack.trainable]
    stats = ppo_update(state.stack, state.step, batch, num_epochs=1, minibatch_size=20, generator=state.generators)
    assert torch.isfinite(stats["loss"]) and "agents" in stats.keys()
    assert any(not torch.equal(a, b) for a, b in zip(before, state.stack.trainable))
