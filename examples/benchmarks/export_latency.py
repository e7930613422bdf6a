"""Latency of an exported policy per call, each format against the torch policy it came from.

The default run's policy (MAPPO on VMAS navigation: 3 agents, a shared 256x256 tanh MLP, a bounded
continuous action) and its GRU variant (``model.kind=gru``), built untrained from the shipped
config (latency does not depend on the weights), exported with ``marl-ppo export``'s code in each
format, and timed on one CPU thread for:

* one agent (``layout=agent``, 1 row), one group (``layout=group``, 1 row of 3 agents) and 64 groups
  (64 env copies at once);
* the torch policy itself (the tensordict actor with deterministic actions, as ``marl-ppo eval``
  runs it) beside ``exported`` (``torch.export.load(...).module()``), ``torchscript``
  (``torch.jit.load``) and ``onnx`` (onnxruntime, CPU provider, one intra-op thread).

Each figure is the median of ``--calls`` calls after 20 warm-up calls, in microseconds.

    .venv/bin/python examples/benchmarks/export_latency.py            # about a minute
    .venv/bin/python examples/benchmarks/export_latency.py --quick
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torchrl.envs import ExplorationType, set_exploration_type

from marl_ppo.config import load_config
from marl_ppo.export import export_policy, policy_graph
from marl_ppo.export.formats import FORMATS
from marl_ppo.run.build import build

warnings.filterwarnings("ignore")


def median_us(call, calls: int) -> float:
    for _ in range(20):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="200 calls, the MLP only")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    calls = 200 if args.quick else args.calls
    models = {"mlp": []} if args.quick else {"mlp": [], "gru": ["model.kind=gru"]}
    print(f"export latency per call, median of {calls} calls, {args.threads} thread(s), microseconds")
    print(f"{'model':<5} {'rows':<14} {'torch policy':>12} " + " ".join(f"{f:>11}" for f in FORMATS))
    for model, overrides in models.items():
        parts = build(load_config(overrides=["env.num_envs=2", *overrides]))
        actor, group = parts.router.losses["agents"].actor_network, parts.groups["agents"]
        with tempfile.TemporaryDirectory() as tmp:
            for layout, batch, label in (
                ("agent", 1, "one agent"),
                ("group", 1, "one group"),
                ("group", 64, "64 groups"),
            ):
                graph = policy_graph(actor, group, layout=layout)
                inputs = graph.example(batch, torch.Generator().manual_seed(0))
                files = export_policy(graph, group, list(FORMATS), Path(tmp) / f"{model}_{layout}")
                arrays = [t.numpy() for t in inputs]
                row = []
                if layout == "group":  # the torch policy reads the group's entries: no agent layout
                    td = parts.env.reset()[:1].expand(batch).clone()
                    for port, value in zip(graph.inputs, inputs):
                        td.set(port.key, value)

                    def policy(td=td):
                        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
                            actor(td)

                    row.append(f"{median_us(policy, calls):>12.1f}")
                else:
                    row.append(f"{'-':>12}")
                for fmt, path in files.items():
                    run = FORMATS[fmt].run(path, graph)
                    if fmt == "onnx":  # one intra-op thread, as torch's
                        import onnxruntime

                        options = onnxruntime.SessionOptions()
                        options.intra_op_num_threads = args.threads
                        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                        feed = {p.name: a for p, a in zip(graph.inputs, arrays)}
                        row.append(f"{median_us(lambda: session.run(None, feed), calls):>11.1f}")
                    else:
                        row.append(f"{median_us(lambda run=run: run(arrays), calls):>11.1f}")
                print(f"{model:<5} {label:<14} " + " ".join(row))
        parts.env.close()


if __name__ == "__main__":
    main()
