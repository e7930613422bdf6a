"""VMAS navigation on CUDA end to end: 4 096 envs simulated on the GPU, the networks and the update there too.

One short, prepared script for a GPU machine (about 1-3 minutes on an H200; it stops its timed
iterations once ``--budget-s`` is spent, 180 s by default). It prints torch / CUDA / GPU versions,
then:

1. raw VMAS stepping on CUDA (random actions, no policy): env-steps/s;
2. our trainer's pieces on ``env.device=cuda`` and ``train.device=cuda`` (large_batch.py's loop:
   ``Collector`` collection, reward table + GAE, ``ppo_update``), BenchMARL's fine-tuned VMAS
   MAPPO settings (minibatch 4 096, 45 epochs, lr 5e-5, gamma 0.9, ...) with 4 096 envs and one
   full episode (100 steps) per env per iteration, i.e. 409 600 frames per iteration: per-iteration
   times, frames/s, the collection/update split, ms per gradient step, peak CUDA memory;
3. a device check: every batch entry, parameter and Adam state must be on CUDA (exit 1 if not);
   module buffers elsewhere are listed as a note.

Without CUDA it stops at once with a clear message (exit 2).

    .venv/bin/python examples/benchmarks/cuda_vmas.py
    .venv/bin/python examples/benchmarks/cuda_vmas.py --quick            # 1 024 envs, 2 epochs, 1 iteration
    .venv/bin/python examples/benchmarks/cuda_vmas.py --epochs 10 --iterations 3
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

FULL = dict(iterations=2, num_envs=4096, frames_per_batch=None, epochs=45, minibatch=4096)
QUICK = dict(iterations=1, num_envs=1024, frames_per_batch=None, epochs=2, minibatch=4096)


def require_cuda() -> None:
    if not torch.cuda.is_available():
        sys.stderr.write(
            f"cuda_vmas: CUDA is not available (torch {torch.__version__}, built with CUDA "
            f"{torch.version.cuda or 'none'}; CUDA_VISIBLE_DEVICES and the driver decide the rest). "
            "This benchmark needs a GPU; run large_batch.py for CPU figures.\n"
        )
        sys.exit(2)


def main(argv=None) -> None:
    t_start = time.perf_counter()
    require_cuda()  # before the heavy imports: fail in a second or two

    import tensordict
    import torchrl
    import vmas
    from large_batch import add_arguments, fill_defaults, fine_tuned_config, report_devices, summarize, time_iterations

    from marl_ppo.envs import make_env

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(p)
    p.add_argument("--budget-s", type=float, default=180.0, help="stop timed iterations once this much time is spent")
    args = fill_defaults(p.parse_args(argv), FULL, QUICK)
    if args.frames_per_batch is None:
        args.frames_per_batch = args.num_envs * 100  # one full episode (max_steps 100) per env
    device = "cuda"
    props = torch.cuda.get_device_properties(0)
    print(
        f"cuda_vmas: torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}), "
        f"torchrl {torchrl.__version__}, tensordict {tensordict.__version__}, vmas {vmas.__version__}"
    )
    print(
        f"GPU: {torch.cuda.get_device_name(0)}, {props.total_memory / 2**30:.0f} GiB, "
        f"compute capability {props.major}.{props.minor}, {torch.cuda.device_count()} device(s); "
        f"{torch.get_num_threads()} CPU threads"
    )

    cfg = fine_tuned_config(args, device)

    # 1. raw env stepping on CUDA
    env = make_env(cfg.env, seed=args.seed, device=device)
    env.rollout(5, break_when_any_done=False)  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    td = env.rollout(100, break_when_any_done=False)
    torch.cuda.synchronize()
    raw = td.numel() / (time.perf_counter() - t0)
    print(f"raw VMAS stepping (random actions): {args.num_envs} envs x 100 steps on {td.device}: {raw:.0f} env-steps/s")
    env.close()
    del env, td

    # 2. the trainer's pieces on CUDA
    print(
        f"settings (BenchMARL fine-tuned VMAS, sizes for the GPU): navigation x{cfg.env.kwargs['n_agents']}, "
        f"{args.num_envs} envs, {args.frames_per_batch} frames/iter, {args.epochs} epochs, "
        f"minibatch {args.minibatch}, lr {cfg.train.lr}, gamma {cfg.loss.gamma}, lambda {cfg.loss.lmbda}, "
        f"grad-norm clip {cfg.train.max_grad_norm}, "
        f"env.device={cfg.env.device}, train.device={cfg.train.device}; up to {args.iterations} timed iteration(s)"
    )
    remaining = args.budget_s - (time.perf_counter() - t_start)
    result = time_iterations(cfg, args.iterations, budget_s=max(remaining, 0.0))
    if not result["rows"]["collect"]:
        sys.exit("cuda_vmas: no timed iteration fitted in --budget-s")
    summarize(result, cfg)

    # 3. where everything lives
    if not report_devices(result["parts"], result["batch"], device):
        sys.exit(1)
    print(f"cuda_vmas: OK in {time.perf_counter() - t_start:.0f}s")


if __name__ == "__main__":
    main()
