"""Large batches: BenchMARL's fine-tuned VMAS setting for our trainer, collection and update timed apart.

BenchMARL's fine-tuned VMAS config (``fine_tuned/vmas/conf/config.yaml`` in the BenchMARL
repository; not shipped in the wheel) runs MAPPO with 600 vectorised envs, 60 000 frames per
iteration, 45 epochs ("minibatch iters") of minibatch 4 096, lr 5e-5, gamma 0.9, grad-norm clip 5,
on the base MAPPO config (``algorithm/mappo.yaml``: clip 0.2, lambda 0.9, entropy 0, critic l2 x1,
shared critic) and the base MLP (``model/layers/mlp.yaml``: 256x2 tanh). It sets every device to
``cuda``; here ``--device`` picks it (``cpu`` by default).

The structure is throughput.py's: the run's collector (``make_collector``, as ``Trainer.fit`` uses
it) gives a batch ("collect"), the bound reward table + ``router.compute_advantages`` ("adv"), then
``ppo_update`` + ``update_policy_weights_`` ("update"), each timed (with ``torch.cuda.synchronize``
on CUDA). One warm-up iteration (a collected batch and a one-minibatch update) is not timed. Prints
per-iteration times, medians, frames/s, the collection/update split, ms per gradient step and the
peak RSS (and the peak CUDA memory on CUDA).

``--floor`` also times throughput.py's raw-torch floor of the update on the same batch (CPU), the
two alternating every 5 epochs, and prints the update ratio ours/floor at this size.

Run (on CPU about a minute per iteration, twice that with ``--floor``; use a quiet machine):

    .venv/bin/python examples/benchmarks/large_batch.py                      # 3 iterations, CPU
    .venv/bin/python examples/benchmarks/large_batch.py --threads 1 --iterations 1 --floor
    .venv/bin/python examples/benchmarks/large_batch.py --device cuda --iterations 5
    .venv/bin/python examples/benchmarks/large_batch.py --quick              # smoke check, seconds

On a shared machine pass ``--threads 1`` (see throughput.py).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
from throughput import GROUP, Floor, batch_tensors
from vs_benchmarl import navigation_overrides

from marl_ppo.config import Config, load_config
from marl_ppo.core.update import ppo_update
from marl_ppo.run.build import Parts, build, build_collector

FULL = dict(iterations=3, num_envs=600, frames_per_batch=60_000, epochs=45, minibatch=4096)
QUICK = dict(iterations=1, num_envs=60, frames_per_batch=6000, epochs=2, minibatch=1024)

# BenchMARL's fine-tuned VMAS values (fine_tuned/vmas/conf/config.yaml + the base mappo/mlp YAMLs).
FINE_TUNED = dict(
    gamma=0.9,
    lr=5e-5,
    max_grad_norm=5.0,
    lmbda=0.9,
    clip_epsilon=0.2,
    entropy_coeff=0.0,
    critic="l2 x1",
    hidden=[256, 256],
    activation="tanh",
    n_agents=3,
    max_steps=100,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--iterations", type=int, help="timed iterations (after one untimed warm-up)")
    p.add_argument("--num-envs", type=int)
    p.add_argument("--frames-per-batch", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--minibatch", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--compile", action="store_true", help="train.compile=true (torch.compile of the losses)")
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke check")


def fill_defaults(args: argparse.Namespace, full: dict, quick: dict) -> argparse.Namespace:
    for k, v in (quick if args.quick else full).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(p)
    p.add_argument("--device", default="cpu", help="env and training device: cpu or cuda")
    p.add_argument("--floor", action="store_true", help="also time throughput.py's raw-torch floor of the update")
    args = fill_defaults(p.parse_args(argv), FULL, QUICK)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda, but torch.cuda.is_available() is False")
    return args


def fine_tuned_config(args, device: str) -> Config:
    """Our config for BenchMARL's fine-tuned VMAS MAPPO on navigation, at ``args``' sizes."""
    return load_config(
        overrides=navigation_overrides(
            n_envs=args.num_envs,
            frames_per_batch=args.frames_per_batch,
            epochs=args.epochs,
            minibatch=args.minibatch,
            total_frames=args.frames_per_batch * (args.iterations + 1),
            seed=args.seed,
            gamma=FINE_TUNED["gamma"],
            device=device,
        )
        + [
            "log.progress=false",
            "log.plot=false",
            f"train.compile={str(getattr(args, 'compile', False)).lower()}",
            "loss.value_norm=none",
        ]
    )  # the floor's critic regresses raw targets: the same work


def off_device(parts: Parts, batch, device: str) -> tuple[list[str], list[str]]:
    """What should live on ``device`` but does not: ``(errors, notes)``.

    Errors: batch leaves, parameters, Adam state. Notes: module buffers (small coefficient
    tensors; a 0-d CPU tensor in a CUDA op is read as a scalar, so these work, but are listed).
    """
    want = torch.device(device).type
    bad = [
        f"batch {'/'.join((k,) if isinstance(k, str) else k)}:{v.device}"
        for k, v in batch.items(include_nested=True, leaves_only=True)
        if v.device.type != want
    ]
    bad += [f"param {n}:{p.device}" for n, p in parts.router.named_parameters() if p.device.type != want]
    for state in parts.step.optimizer.state.values():
        bad += [
            f"adam {k}:{v.device}" for k, v in state.items() if torch.is_tensor(v) and v.ndim and v.device.type != want
        ]
    notes = [f"buffer {n}:{b.device}" for n, b in parts.router.named_buffers() if b.device.type != want]
    return bad, notes


def report_devices(parts: Parts, batch, device: str, log=print) -> bool:
    """Prints where things live; False if a batch entry, parameter or Adam state is off ``device``."""
    bad, notes = off_device(parts, batch, device)
    if bad:
        log(f"devices: NOT on {device} ({len(bad)}): " + ", ".join(bad[:30]))
    else:
        log(f"devices: batch, parameters and Adam state all on {device}")
    if notes:
        log(f"devices: buffers not on {device} (note): " + ", ".join(notes))
    return not bad


def time_iterations(
    cfg: Config, iterations: int, *, budget_s: float | None = None, log=print, floor: bool = False
) -> dict:
    """Warm-up, then ``iterations`` timed ones (fewer if ``budget_s`` runs out). Returns the rows and the parts.

    ``floor``: the update alternates, every 5 epochs, with throughput.py's raw-torch floor on the same
    batch ("floor" row).
    """
    device = cfg.train.device
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    parts = build(cfg)
    router, step = parts.router, parts.step
    fpb, mb = cfg.train.frames_per_batch, cfg.train.minibatch_size
    collector = build_collector(cfg, parts.env, router.policy, total_frames=fpb * (iterations + 1))
    batches = iter(collector)
    raw = _floor(parts, cfg) if floor else None
    t_start = time.perf_counter()
    try:
        # warm-up (untimed): first collection (env reset, lazy inits), one minibatch of update
        batch = parts.reward_table(next(batches))
        router.compute_advantages(batch)
        ppo_update(router, step, batch[:, : -(-mb // batch.shape[0])], num_epochs=1, minibatch_size=mb)
        if raw is not None:
            raw.update(*(t[:mb] for t in batch_tensors(batch)), epochs=1, minibatch=mb)
        collector.update_policy_weights_()
        sync()
        log(f"  warm-up {time.perf_counter() - t_start:.1f}s (batch {list(batch.batch_size)})")
        rows: dict[str, list[float]] = {"collect": [], "adv": [], "update": []}
        if raw is not None:
            rows["floor"] = []
        for it in range(iterations):
            if budget_s is not None and it and time.perf_counter() - t_start > budget_s:
                log(f"  time budget of {budget_s:.0f}s spent: stopping after {it} timed iteration(s)")
                break
            sync()
            t0 = time.perf_counter()
            batch = next(batches)
            sync()
            t1 = time.perf_counter()
            batch = parts.reward_table(batch)
            router.compute_advantages(batch)
            sync()
            t2 = time.perf_counter()
            t_update, t_floor = _update(parts, batch, cfg, raw)
            collector.update_policy_weights_()
            sync()
            for k, v in (("collect", t1 - t0), ("adv", t2 - t1), ("update", t_update)):
                rows[k].append(v)
            if raw is not None:
                rows["floor"].append(t_floor)
            log(
                f"  iteration {it + 1}: collect {t1 - t0:.2f}s  adv {t2 - t1:.3f}s  update {t_update:.2f}s  "
                + (f"floor {t_floor:.2f}s (ratio {t_update / t_floor:.2f}x)  " if raw is not None else "")
                + f"frames/s {batch.numel() / (t1 - t0 + t2 - t1 + t_update):.0f}"
            )
    finally:
        collector.shutdown()
    return {"rows": rows, "parts": parts, "batch": batch, "frames": batch.numel()}


def _floor(parts: Parts, cfg: Config):
    """throughput.py's raw-torch floor of the update, for the run's (single) group."""
    spec = parts.groups[GROUP]
    act = spec.agent_action_spec
    n_agents, obs_dim = spec.observation_shape
    return Floor(
        obs_dim,
        act.shape[-1],
        n_agents,
        act.space.low[0].clone(),
        act.space.high[0].clone(),
        lr=cfg.train.lr,
        clip=cfg.loss.clip_epsilon,
        max_grad_norm=cfg.train.max_grad_norm,
    )


def _update(parts: Parts, batch, cfg: Config, raw, chunk: int = 5) -> tuple[float, float]:
    """Seconds of our update (and of the floor's on the same batch, alternating every ``chunk`` epochs)."""
    mb, epochs = cfg.train.minibatch_size, cfg.train.num_epochs
    if raw is None:
        t = time.perf_counter()
        ppo_update(parts.router, parts.step, batch, num_epochs=epochs, minibatch_size=mb)
        return time.perf_counter() - t, float("nan")
    tensors = batch_tensors(batch)
    raw.load_from(parts.router)
    t_ours = t_floor = 0.0
    for done in range(0, epochs, chunk):
        n = min(chunk, epochs - done)
        t0 = time.perf_counter()
        raw.update(*tensors, epochs=n, minibatch=mb)
        t1 = time.perf_counter()
        ppo_update(parts.router, parts.step, batch, num_epochs=n, minibatch_size=mb)
        t2 = time.perf_counter()
        t_floor, t_ours = t_floor + t1 - t0, t_ours + t2 - t1
    return t_ours, t_floor


def summarize(result: dict, cfg: Config, log=print) -> dict:
    rows, frames = result["rows"], result["frames"]
    med = {k: statistics.median(v) for k, v in rows.items()}
    it_s = med["collect"] + med["adv"] + med["update"]
    n_mb = max(frames // cfg.train.minibatch_size, 1)
    steps = cfg.train.num_epochs * n_mb
    out = {
        "iteration_s": it_s,
        "fps": frames / it_s,
        "collect_fps": frames / med["collect"],
        "collect_share": med["collect"] / it_s,
        "update_share": (med["adv"] + med["update"]) / it_s,
        "ms_per_step": 1e3 * med["update"] / steps,
        **{f"{k}_s": v for k, v in med.items()},
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    log(
        f"\nper iteration (median of {len(rows['collect'])}; {frames} frames, {cfg.train.num_epochs} epochs x "
        f"{n_mb} minibatches of {cfg.train.minibatch_size} = {steps} gradient steps)"
    )
    log(f"  collect        {med['collect']:8.2f}s  ({100 * out['collect_share']:.0f}%)")
    log(f"  reward+GAE     {med['adv']:8.3f}s")
    log(
        f"  ppo_update     {med['update']:8.2f}s  ({100 * out['update_share']:.0f}% with reward+GAE; "
        f"{out['ms_per_step']:.2f} ms/step)"
    )
    log(f"  iteration      {it_s:8.2f}s")
    if "floor" in rows:
        ratios = [u / f for u, f in zip(rows["update"], rows["floor"])]
        out["update_floor_ratio"] = statistics.median(ratios)
        log(f"  floor update   {med['floor']:8.2f}s  ({1e3 * med['floor'] / steps:.2f} ms/step)")
        log(
            f"update ratio ours/floor {out['update_floor_ratio']:.2f}x  (iterations: "
            + ", ".join(f"{r:.2f}" for r in ratios)
            + ")"
        )
    log(f"frames/s {out['fps']:.0f}  (collect only {out['collect_fps']:.0f})")
    log(f"split collect/update {100 * out['collect_share']:.0f}/{100 * out['update_share']:.0f}")
    log(f"peak RSS {out['peak_rss_mib']:.0f} MiB")
    if torch.device(cfg.train.device).type == "cuda":
        out["cuda_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        log(f"peak CUDA memory allocated {out['cuda_peak_mib']:.0f} MiB")
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    cfg = fine_tuned_config(args, args.device)
    print(f"large_batch: torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}")
    print(
        f"settings (BenchMARL fine-tuned VMAS): navigation x{cfg.env.kwargs['n_agents']}, {args.num_envs} envs, "
        f"max_steps {cfg.env.max_steps}, {args.frames_per_batch} frames/iter, {args.epochs} epochs, "
        f"minibatch {args.minibatch}, lr {cfg.train.lr}, gamma {cfg.loss.gamma}, lambda {cfg.loss.lmbda}, "
        f"clip {cfg.loss.clip_epsilon}, entropy {cfg.loss.entropy_coeff}, critic {cfg.loss.loss_critic_type} "
        f"x{cfg.loss.critic_coeff}, grad-norm clip {cfg.train.max_grad_norm}, MLP {cfg.model.hidden} "
        f"{cfg.model.activation}, shared params, centralised critic; {args.iterations} timed iteration(s)"
    )
    result = time_iterations(cfg, args.iterations, floor=args.floor)
    report_devices(result["parts"], result["batch"], args.device)
    summarize(result, cfg)


if __name__ == "__main__":
    main()
