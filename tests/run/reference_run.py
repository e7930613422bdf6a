"""The default run, short, digested: what must stay bit for bit the same across a refactor.

``python tests/run/reference_run.py --write`` records the digest of the current code into
``tests/run/data/reference_default.json`` (``--seeds``: a group of four seeds in one process, every
seed's directory, into ``reference_seeds.json``); ``tests/run/test_reference.py`` reruns the same command and
compares. The run goes through the ``marl-ppo`` command line and the digest reads only the run
directory (its checkpoint files and metric CSVs), so the same script serves the code before and
after a restructuring.

Digest: every tensor of every checkpoint (parameters, optimizer and scheduler state, RNG states)
as the SHA-256 of its bytes with its dtype and shape, every other checkpoint entry by value, and
every metric CSV line except the ``time/*`` timings. Bit-for-bit results are defined for one
torch build on one CPU kernel family: the digest records both, and the test skips on a machine
whose differ (a different SIMD path legitimately changes the last bits).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REFERENCE = Path(__file__).resolve().parent / "data" / "reference_default.json"
SEEDS_REFERENCE = Path(__file__).resolve().parent / "data" / "reference_seeds.json"
# the default config (MAPPO on VMAS navigation), three iterations, one thread (thread count changes
# reduction orders), a periodic checkpoint at iteration 2 (the episode restart it implies included)
OVERRIDES = [
    "train.total_frames=18000",
    "train.num_threads=1",
    "log.checkpoint_every=2",
    "log.progress=false",
    "log.plot=false",
    "log.eval_both=false",  # the evaluations as recorded: the configured mode alone
]
# a group of four seeds in one process (train.seeds): smaller batches, the same checkpoint rhythm
SEEDS_OVERRIDES = [
    "train.seeds=[0,1,2,3]",
    "env.num_envs=20",
    "train.frames_per_batch=2000",
    "train.total_frames=6000",
    "train.num_threads=1",
    "log.checkpoint_every=2",
    "log.progress=false",
    "log.plot=false",
    "log.eval_both=false",
]


def machine() -> dict[str, str]:
    """The torch build, its CPU kernel family and the CPU model: two AVX512 CPUs of different makers
    (an Intel Xeon, an AMD EPYC) give different last bits through the same kernels."""
    return {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu": _cpu_model(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _digest_value(value, prefix: str, out: dict[str, object]) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8) if t.dtype != torch.bool else t.reshape(-1).to(torch.uint8)
        out[prefix] = f"{t.dtype}{list(t.shape)}:{hashlib.sha256(raw.numpy().tobytes()).hexdigest()}"
    elif isinstance(value, dict):
        for k, v in value.items():
            _digest_value(v, f"{prefix}/{k}", out)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _digest_value(v, f"{prefix}[{i}]", out)
    else:
        out[prefix] = repr(value)


def digest(run_dir: Path) -> dict[str, object]:
    """The run directory's checkpoints and metric CSVs, digested (see the module docstring)."""
    out: dict[str, object] = {}
    for path in sorted((run_dir / "checkpoints").glob("*.pt")):
        state = torch.load(path, weights_only=True, map_location="cpu")
        state.pop("config", None)  # the resolved YAML: compared as config.yaml below
        tensors: dict[str, object] = {}
        _digest_value(state, "", tensors)
        out[f"checkpoint:{path.name}"] = tensors
    root = run_dir / "logs" / "scalars"
    out["scalars"] = {
        str(p.relative_to(root)): p.read_text().splitlines()
        for p in sorted(root.rglob("*.csv"))
        if not str(p.relative_to(root)).startswith("time")
    }
    # the resolved config, but for log.root (a temporary folder)
    out["config.yaml"] = [
        ln for ln in (run_dir / "config.yaml").read_text().splitlines() if not ln.startswith("  root: ")
    ]
    return out


def run(root: Path) -> Path:
    """Trains the reference run under ``root`` through the command line; returns its directory."""
    run_dir = root / "reference"
    cmd = [sys.executable, "-m", "marl_ppo.cli", "train", *OVERRIDES, f"log.root={root}", "log.name=reference"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return run_dir


def run_seeds(root: Path) -> dict[str, object]:
    """Trains the reference group of seeds under ``root``; returns every seed's directory digested."""
    cmd = [sys.executable, "-m", "marl_ppo.cli", "train", *SEEDS_OVERRIDES, f"log.root={root}", "log.name=group"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return {
        path.name: digest(path) for path in sorted(root.glob("group-seed[0-9]*"))
    }  # not group-seeds, the group result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"record the digest into {REFERENCE}")
    parser.add_argument("--seeds", action="store_true", help=f"the group of seeds instead ({SEEDS_REFERENCE})")
    args = parser.parse_args()
    target, overrides = (SEEDS_REFERENCE, SEEDS_OVERRIDES) if args.seeds else (REFERENCE, OVERRIDES)
    with tempfile.TemporaryDirectory() as tmp:
        got = run_seeds(Path(tmp)) if args.seeds else digest(run(Path(tmp)))
        result = {"machine": machine(), "overrides": overrides, "digest": got}
    if args.write:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"wrote {target}")
    else:
        print(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
