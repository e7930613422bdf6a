"""Throughput of one training iteration: our trainer against a raw-torch floor for the same update.

The setting is BenchMARL's base MAPPO config on VMAS navigation (3 agents, 10 envs, max_steps 100,
6 000 frames per iteration, 45 epochs, minibatch 400, lr 5e-5, MLP 256x2 tanh, clip 0.2,
gamma 0.99, lambda 0.9, grad-norm clip 5, centralised critic with shared parameters), the one
that DESIGN.md's "What we measure against" quotes (BenchMARL: about 21 s an iteration, 285 frames/s;
a raw-torch floor: about 9.8 s).

Each repeat, for --iterations-per-repeat iterations:

* ours: collect a batch with a torchrl ``Collector`` (as ``Trainer.fit`` does), apply the bound
  reward table and ``router.compute_advantages`` ("adv"), then ``ppo_update`` ("update");
* floor: the same update in plain torch on the tensors of that same batch (observations, actions,
  old log-probs, advantages, value targets): the same MLP shapes (policy obs->256->256->2*act with
  tanh, biased-softplus scale, TanhNormal log-prob by hand; centralised critic over the 3 agents'
  concatenated observations -> 256 -> 256 -> 1 value shared by the agents, as torchrl's
  ``SharedAgentMLP(centralized=True)`` does), the same minibatches and epochs,
  one (fused) Adam, clipped PPO objective + MSE critic loss, grad-norm clip. No tensordict/torchrl
  inside. The two updates alternate every ``--chunk-epochs`` epochs on the same batch.

The floor starts from the weights that collected the batch, so its first log-probs must equal the
stored ones ("lp check" below; a large value means the floor computes a different policy).
Prints medians over repeats, the update ratio ours/floor, frames/s and the peak RSS.

Run (takes minutes; use a quiet machine):

    .venv/bin/python examples/benchmarks/throughput.py
    .venv/bin/python examples/benchmarks/throughput.py --quick        # smoke check, seconds

On a shared machine pass ``--threads 1``: with another busy process, torch's default of one
intra-op thread per core can make every matmul tens of times slower (OpenMP threads spin-wait).
"""
from __future__ import annotations

import argparse
import math
import resource
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F
from torchrl.collectors import Collector

from marl_ppo.config import load_config
from marl_ppo.trainer import build, ppo_update

GROUP = "agents"
FULL = dict(repeats=3, num_envs=10, frames_per_batch=6000, epochs=45, minibatch=400)
QUICK = dict(repeats=3, num_envs=10, frames_per_batch=1200, epochs=2, minibatch=200)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int)
    p.add_argument("--iterations-per-repeat", type=int, default=1)
    p.add_argument("--num-envs", type=int)
    p.add_argument("--frames-per-batch", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--minibatch", type=int)
    p.add_argument("--chunk-epochs", type=int, default=5,
                   help="ours and the floor alternate every this many epochs within an iteration")
    p.add_argument("--compile", action="store_true", help="ours with train.compile=true (torch.compile of the losses)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke check (seconds)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for k, v in (QUICK if args.quick else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def benchmarl_config(args):
    return load_config(overrides=[
        "env.scenario=navigation", "env.kwargs.n_agents=3", f"env.num_envs={args.num_envs}", "env.max_steps=100",
        "loss.algorithm=mappo", "model.share_params=true", "model.hidden=[256,256]", "model.activation=tanh",
        "loss.clip_epsilon=0.2", "loss.gamma=0.99", "loss.lmbda=0.9", "loss.entropy_coeff=0.0",
        "loss.critic_coeff=1.0", "loss.loss_critic_type=l2", "loss.normalize_advantage=false",
        f"train.frames_per_batch={args.frames_per_batch}", f"train.num_epochs={args.epochs}",
        f"train.minibatch_size={args.minibatch}", "train.lr=5e-5", "train.max_grad_norm=5.0",
        "train.total_frames=100000000", "log.progress=false", "log.plot=false",
        f"train.compile={str(getattr(args, 'compile', False)).lower()}",
    ])


# -- the raw-torch floor ----------------------------------------------------------------------


def mlp(n_in: int, n_out: int, hidden=(256, 256)) -> nn.Sequential:
    layers, last = [], n_in
    for h in hidden:
        layers += [nn.Linear(last, h), nn.Tanh()]
        last = h
    return nn.Sequential(*layers, nn.Linear(last, n_out))


class Floor:
    """Policy + centralised critic + one Adam; ``update`` is the PPO epochs on plain tensors."""

    SCALE_MIN, SCALE_LB = 0.01, 1e-4  # tensordict's NormalParamExtractor("biased_softplus_1.0")

    def __init__(self, obs_dim, act_dim, n_agents, low, high, *, lr, clip, max_grad_norm, critic_coeff=1.0):
        self.policy = mlp(obs_dim, 2 * act_dim)
        self.critic = mlp(n_agents * obs_dim, 1)
        self.params = [*self.policy.parameters(), *self.critic.parameters()]
        self.optimizer = torch.optim.Adam(self.params, lr=lr, fused=True)  # the same Adam kernel as ours
        self.clip, self.max_grad_norm, self.critic_coeff = clip, max_grad_norm, critic_coeff
        self.mid, self.half = (high + low) / 2, (high - low) / 2
        self.bias = math.log(math.expm1(1.0 - self.SCALE_MIN))  # softplus(0 + bias) + min = 1

    def load_from(self, router) -> None:
        """Copies our actor's and critic's weights (same layer order and shapes)."""
        loss = router.losses[GROUP]
        with torch.no_grad():
            for mine, src in ((self.policy, loss.actor_network), (self.critic, loss.critic_network)):
                theirs = list(src.parameters())
                for a, b in zip(mine.parameters(), theirs, strict=True):
                    a.copy_(b.reshape(a.shape))
        self.optimizer = torch.optim.Adam(self.params, lr=self.optimizer.param_groups[0]["lr"], fused=True)

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """TanhNormal log-prob per agent, ``[mb, n]``, like torchrl's safe-tanh transform."""
        loc, raw_scale = self.policy(obs).chunk(2, -1)
        scale = (F.softplus(raw_scale + self.bias) + self.SCALE_MIN).clamp_min(self.SCALE_LB)
        y = (action - self.mid) / self.half
        lim = 1.0 - torch.finfo(y.dtype).resolution
        x = y.clamp(-lim, lim).atanh()
        normal = -((x - loc) ** 2) / (2 * scale**2) - scale.log() - 0.5 * math.log(2 * math.pi)
        log_det = 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x)) + self.half.log()
        return (normal - log_det).sum(-1)

    def update(self, obs, action, old_lp, adv, target, *, epochs: int, minibatch: int) -> None:
        n = obs.shape[0]
        n_mb = max(n // minibatch, 1)
        n_agents = obs.shape[1]
        for _ in range(epochs):
            perm = torch.randperm(n)
            for i in range(n_mb):
                idx = perm[i * minibatch:(i + 1) * minibatch]
                o, a, adv_mb = obs[idx], action[idx], adv[idx]
                log_ratio = self.log_prob(o, a) - old_lp[idx]
                ratio = log_ratio.exp()
                clipped = ratio.clamp(1 - self.clip, 1 + self.clip)
                loss_objective = -torch.minimum(ratio * adv_mb, clipped * adv_mb).mean()
                value = self.critic(o.flatten(-2)).unsqueeze(-2).expand(-1, n_agents, 1)
                loss_critic = self.critic_coeff * F.mse_loss(value, target[idx])
                self.optimizer.zero_grad(set_to_none=True)
                (loss_objective + loss_critic).backward()
                nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
                self.optimizer.step()


def batch_tensors(batch) -> tuple[torch.Tensor, ...]:
    """The tensors the update reads, flattened over envs x time: obs, action, old log-prob, adv, target."""
    g = batch.get(GROUP)
    n, d = g.get("observation").shape[-2:]

    def flat(t: torch.Tensor, *tail: int) -> torch.Tensor:
        return t.reshape(-1, *tail).clone()

    return (flat(g.get("observation"), n, d), flat(g.get("action"), n, g.get("action").shape[-1]),
            flat(g.get("action_log_prob"), n), flat(g.get("advantage"), n), flat(g.get("value_target"), n, 1))


# -- the benchmark ----------------------------------------------------------------------------


def main() -> None:
    args = parse_args()
    cfg = benchmarl_config(args)
    parts = build(cfg)
    router, step = parts.router, parts.step
    spec = parts.groups[GROUP]
    act = spec.agent_action_spec
    n_agents, obs_dim = spec.observation_shape
    floor = Floor(obs_dim, act.shape[-1], n_agents, act.space.low[0].clone(), act.space.high[0].clone(),
                  lr=cfg.train.lr, clip=cfg.loss.clip_epsilon, max_grad_norm=cfg.train.max_grad_norm)
    total = args.frames_per_batch * (args.repeats * args.iterations_per_repeat + 1)
    collector = Collector(parts.env, router.policy, frames_per_batch=args.frames_per_batch, total_frames=total,
                          device=cfg.train.device, auto_register_policy_transforms=False)
    batches = iter(collector)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; navigation x{n_agents}, "
          f"{args.num_envs} envs, {args.frames_per_batch} frames/iter, {args.epochs} epochs, minibatch {args.minibatch}, "
          f"{args.repeats} repeats x {args.iterations_per_repeat} iter, compile={args.compile}")

    # warm-up (one minibatch each, untimed): first-call allocations and lazy inits (and compiling)
    batch = parts.reward_table(next(batches))
    router.compute_advantages(batch)
    ppo_update(router, step, batch[:, : max(args.minibatch // batch.shape[0], 1)], num_epochs=1,
               minibatch_size=args.minibatch)
    floor.update(*(t[: args.minibatch] for t in batch_tensors(batch)), epochs=1, minibatch=args.minibatch)

    def iteration() -> dict[str, float]:
        t0 = time.perf_counter()
        batch = next(batches)
        t1 = time.perf_counter()
        batch = parts.reward_table(batch)
        router.compute_advantages(batch)
        t2 = time.perf_counter()
        tensors = batch_tensors(batch)
        floor.load_from(router)  # the weights that collected this batch
        with torch.no_grad():
            lp_check = (floor.log_prob(tensors[0], tensors[1]) - tensors[2]).abs().max().item()
        # the two updates alternate in chunks of epochs, so that a slow spell of a shared machine
        # falls on both sides of the ratio rather than on one
        t_floor = t_ours = 0.0
        for done in range(0, args.epochs, args.chunk_epochs):
            chunk = min(args.chunk_epochs, args.epochs - done)
            t3 = time.perf_counter()
            floor.update(*tensors, epochs=chunk, minibatch=args.minibatch)
            t4 = time.perf_counter()
            ppo_update(router, step, batch, num_epochs=chunk, minibatch_size=args.minibatch)
            t5 = time.perf_counter()
            t_floor, t_ours = t_floor + t4 - t3, t_ours + t5 - t4
        collector.update_policy_weights_()
        return {"collect": t1 - t0, "adv": t2 - t1, "floor": t_floor, "update": t_ours, "lp_check": lp_check}

    rows: dict[str, list[float]] = {k: [] for k in ("collect", "adv", "update", "floor", "lp_check")}
    for rep in range(args.repeats):
        sums = dict.fromkeys(rows, 0.0)
        for _ in range(args.iterations_per_repeat):
            for k, v in iteration().items():
                sums[k] = max(sums[k], v) if k == "lp_check" else sums[k] + v / args.iterations_per_repeat
        for k, v in sums.items():
            rows[k].append(v)
        print(f"  repeat {rep + 1}: collect {sums['collect']:.2f}s  adv {sums['adv']:.3f}s  "
              f"update {sums['update']:.2f}s  floor {sums['floor']:.2f}s  "
              f"ratio {sums['update'] / sums['floor']:.2f}x  lp check {sums['lp_check']:.1e}")
    collector.shutdown()

    med = {k: statistics.median(v) for k, v in rows.items()}
    n_steps = args.epochs * max(args.frames_per_batch // args.minibatch, 1)
    ours_iter = med["collect"] + med["adv"] + med["update"]
    print(f"\nper iteration (median of {args.repeats}; {n_steps} gradient steps)")
    print(f"  {'':<22}{'seconds':>10}{'ms/step':>10}")
    for label, key in (("ours: collect", "collect"), ("ours: reward+GAE", "adv"), ("ours: ppo_update", "update"),
                       ("floor: update", "floor")):
        per_step = f"{1e3 * med[key] / n_steps:10.2f}" if key in ("update", "floor") else f"{'':>10}"
        print(f"  {label:<22}{med[key]:10.2f}{per_step}")
    print(f"  {'ours: iteration':<22}{ours_iter:10.2f}")
    ratios = [u / f for u, f in zip(rows["update"], rows["floor"])]
    print(f"  update ratio ours/floor     {statistics.median(ratios):.2f}x  (median of the repeats' ratios; "
          f"ratio of the medians {med['update'] / med['floor']:.2f}x)")
    print(f"  frames/s (ours, collect + update)   {args.frames_per_batch / ours_iter:.0f}")
    print(f"  collect frames/s                    {args.frames_per_batch / med['collect']:.0f}")
    print(f"  floor log-prob check (max |lp - old lp|)  {max(rows['lp_check']):.1e}")
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
