"""Throughput of one training iteration: our trainer against a raw-torch floor, collection included.

Two settings (``--config``):

* ``benchmarl`` (default): BenchMARL's base MAPPO config on VMAS navigation (3 agents, 10 envs,
  max_steps 100, 6 000 frames per iteration, 45 epochs, minibatch 400, lr 5e-5, MLP 256x2 tanh,
  clip 0.2, gamma 0.99, lambda 0.9, grad-norm clip 5, centralised critic with shared parameters);
* ``navigation``: our default config ``configs/navigation.yaml`` (60 envs, 6 000 frames,
  10 epochs, minibatch 400), where collection weighs more.

Each repeat, for --iterations-per-repeat iterations, ours and the floor run side by side:

* collection. Ours: the run's collector (``make_collector``, as ``Trainer.fit`` uses it; on VMAS
  the lean collector of ``marl_ppo.collect.lean_vmas``). Floor: ``vmas.make_env`` stepped directly (no
  torchrl wrapper, no collector, no TensorDict) with the same policy network as plain torch modules
  (obs -> 256 -> 256 -> loc, scale; TanhNormal sample and log-prob by hand), keeping the frames an
  update needs (observation, next observation, action, log-prob, reward, done), the same number of
  frames. torchrl's own ``Collector`` on the same env and policy is timed too, for reference;
* advantages. Ours: the bound reward table and ``router.compute_advantages``. Floor: its critic on
  the observations and next observations, and GAE as a reverse loop over time;
* the update. Ours: ``ppo_update``. Floor: the same update in plain torch on the tensors of our
  batch: the same MLP shapes (policy obs->256->256->2*act with tanh, biased-softplus scale,
  TanhNormal log-prob by hand; centralised critic over the 3 agents' concatenated observations ->
  256 -> 256 -> 1 value shared by the agents, as torchrl's ``SharedAgentMLP(centralized=True)``
  does), the same minibatches and epochs, one (fused) Adam, clipped PPO objective + MSE critic
  loss, grad-norm clip. No tensordict/torchrl inside. The two updates alternate every
  ``--chunk-epochs`` epochs on the same batch.

The floor's update starts from the weights that collected the batch, so its first log-probs must
equal the stored ones ("lp check" below; a large value means the floor computes a different policy).
Prints medians over repeats and the ratios ours/floor (median of the repeats' ratios) for
collection, the update and the whole iteration; frames/s and the peak RSS. Figures:
``docs/performance.md``.

Run (takes minutes; use a quiet machine):

    .venv/bin/python examples/benchmarks/throughput.py --threads 1
    .venv/bin/python examples/benchmarks/throughput.py --threads 1 --compile
    .venv/bin/python examples/benchmarks/throughput.py --threads 1 --config navigation
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
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torchrl.collectors import Collector

from marl_ppo.config import load_config
from marl_ppo.core.update import ppo_update
from marl_ppo.envs import make_env
from marl_ppo.run.build import build, build_collector

GROUP = "agents"
ROOT = Path(__file__).resolve().parents[2]
FULL = {
    "benchmarl": dict(repeats=3, num_envs=10, frames_per_batch=6000, epochs=45, minibatch=400),
    "navigation": dict(repeats=3, num_envs=60, frames_per_batch=6000, epochs=10, minibatch=400),
}
QUICK = dict(repeats=3, num_envs=10, frames_per_batch=1200, epochs=2, minibatch=200)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--config",
        choices=sorted(FULL),
        default="benchmarl",
        help="benchmarl: BenchMARL's base config (45 epochs); navigation: configs/navigation.yaml (10 epochs)",
    )
    p.add_argument("--repeats", type=int)
    p.add_argument("--iterations-per-repeat", type=int, default=1)
    p.add_argument("--num-envs", type=int)
    p.add_argument("--frames-per-batch", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--minibatch", type=int)
    p.add_argument(
        "--chunk-epochs",
        type=int,
        default=5,
        help="ours and the floor alternate every this many epochs within an iteration",
    )
    p.add_argument("--compile", action="store_true", help="ours with train.compile=true (torch.compile of the losses)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke check (seconds)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for k, v in (QUICK if args.quick else FULL[args.config]).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def run_config(args):
    """The config of ``--config``, with the sizes of the command line."""
    common = [
        f"env.num_envs={args.num_envs}",
        f"train.frames_per_batch={args.frames_per_batch}",
        f"train.num_epochs={args.epochs}",
        f"train.minibatch_size={args.minibatch}",
        "train.total_frames=100000000",
        "log.progress=false",
        "log.plot=false",
        f"train.compile={str(getattr(args, 'compile', False)).lower()}",
        # the floor's critic regresses raw targets: ours without value normalisation does the
        # same work (normalisation costs ~2 % of the update, docs/performance.md)
        "loss.value_norm=none",
    ]
    if args.config == "navigation":
        return load_config(ROOT / "configs" / "navigation.yaml", overrides=common)
    return benchmarl_config(args)


def benchmarl_config(args):
    return load_config(
        overrides=[
            "env.scenario=navigation",
            "env.kwargs.n_agents=3",
            f"env.num_envs={args.num_envs}",
            "env.max_steps=100",
            "loss.algorithm=mappo",
            "model.share_params=true",
            "model.hidden=[256,256]",
            "model.activation=tanh",
            "loss.clip_epsilon=0.2",
            "loss.gamma=0.99",
            "loss.lmbda=0.9",
            "loss.entropy_coeff=0.0",
            "loss.critic_coeff=1.0",
            "loss.loss_critic_type=l2",
            "loss.normalize_advantage=false",
            f"train.frames_per_batch={args.frames_per_batch}",
            f"train.num_epochs={args.epochs}",
            f"train.minibatch_size={args.minibatch}",
            "train.lr=5e-5",
            "train.max_grad_norm=5.0",
            "train.total_frames=100000000",
            "log.progress=false",
            "log.plot=false",
            f"train.compile={str(getattr(args, 'compile', False)).lower()}",
            "loss.value_norm=none",
        ]
    )


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
                idx = perm[i * minibatch : (i + 1) * minibatch]
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


class CollectFloor:
    """VMAS stepped directly with the floor's policy network: the frames an update needs, nothing else.

    No torchrl env, collector or TensorDict: ``vmas.make_env`` with the run's scenario, the policy's
    TanhNormal sample and log-prob by hand, VMAS's own resets of the envs that are done. Keeps per
    step the observation, next observation, action, log-prob, reward and done, stacked once into
    ``[envs, T, ...]`` tensors at the end, as any trainer must keep them.
    """

    def __init__(self, cfg, floor: Floor) -> None:
        import vmas

        e = cfg.env
        self.env = vmas.make_env(
            e.scenario,
            num_envs=e.num_envs,
            device="cpu",
            continuous_actions=True,
            seed=cfg.train.seed,
            max_steps=e.max_steps,
            **dict(e.kwargs),
        )
        self.floor = floor
        self.steps = cfg.train.frames_per_batch // e.num_envs
        self.obs = torch.stack(self.env.reset(), 1)

    @torch.no_grad()
    def collect(self) -> dict[str, torch.Tensor]:
        f = self.floor
        keep = {k: [] for k in ("obs", "next_obs", "action", "log_prob", "reward", "done")}
        for _ in range(self.steps):
            loc, raw_scale = f.policy(self.obs).chunk(2, -1)
            scale = (F.softplus(raw_scale + f.bias) + f.SCALE_MIN).clamp_min(f.SCALE_LB)
            x = loc + scale * torch.randn_like(loc)
            action = f.mid + f.half * torch.tanh(x)
            normal = -((x - loc) ** 2) / (2 * scale**2) - scale.log() - 0.5 * math.log(2 * math.pi)
            log_det = 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x)) + f.half.log()
            obs, rews, dones, _ = self.env.step(list(action.unbind(1)))
            next_obs = torch.stack(obs, 1)
            for k, v in (
                ("obs", self.obs),
                ("next_obs", next_obs),
                ("action", action),
                ("log_prob", (normal - log_det).sum(-1)),
                ("reward", torch.stack(rews, 1).unsqueeze(-1)),
                ("done", dones),
            ):
                keep[k].append(v)
            if dones.any():
                if dones.all():
                    self.env.reset(return_observations=False)
                else:
                    for i in dones.nonzero().squeeze(-1).tolist():
                        self.env.reset_at(i, return_observations=False)
                next_obs = torch.stack(
                    self.env.get_from_scenario(
                        get_observations=True, get_rewards=False, get_infos=False, get_dones=False
                    )[0],
                    1,
                )
            self.obs = next_obs
        return {k: torch.stack(v, 1) for k, v in keep.items()}


@torch.no_grad()
def floor_advantages(floor: Floor, data: dict[str, torch.Tensor], gamma: float, lmbda: float) -> torch.Tensor:
    """The floor's GAE: its critic on the observations and next observations, a reverse loop over time."""
    n = data["obs"].shape[-2]
    value = floor.critic(data["obs"].flatten(-2)).unsqueeze(-2).expand(*data["obs"].shape[:-1], 1)
    next_value = floor.critic(data["next_obs"].flatten(-2)).unsqueeze(-2).expand(*data["obs"].shape[:-1], 1)
    not_done = (~data["done"]).float().view(*data["done"].shape, 1, 1).expand(-1, -1, n, 1)
    delta = data["reward"] + gamma * not_done * next_value - value
    adv = torch.empty_like(delta)
    last = torch.zeros_like(delta[:, 0])
    for t in range(delta.shape[1] - 1, -1, -1):
        last = delta[:, t] + gamma * lmbda * not_done[:, t] * last
        adv[:, t] = last
    return adv, adv + value


def batch_tensors(batch) -> tuple[torch.Tensor, ...]:
    """The tensors the update reads, flattened over envs x time: obs, action, old log-prob, adv, target."""
    g = batch.get(GROUP)
    n, d = g.get("observation").shape[-2:]

    def flat(t: torch.Tensor, *tail: int) -> torch.Tensor:
        return t.reshape(-1, *tail).clone()

    return (
        flat(g.get("observation"), n, d),
        flat(g.get("action"), n, g.get("action").shape[-1]),
        flat(g.get("action_log_prob"), n),
        flat(g.get("advantage"), n),
        flat(g.get("value_target"), n, 1),
    )


# -- the benchmark ----------------------------------------------------------------------------


def main() -> None:
    args = parse_args()
    cfg = run_config(args)
    parts = build(cfg)
    router, step = parts.router, parts.step
    spec = parts.groups[GROUP]
    act = spec.agent_action_spec
    n_agents, obs_dim = spec.observation_shape
    floor = Floor(
        obs_dim,
        act.shape[-1],
        n_agents,
        act.space.low[0].clone(),
        act.space.high[0].clone(),
        lr=cfg.train.lr,
        clip=cfg.loss.clip_epsilon,
        max_grad_norm=cfg.train.max_grad_norm,
    )
    floor.load_from(router)
    collect_floor = CollectFloor(cfg, floor)
    total = args.frames_per_batch * (args.repeats * args.iterations_per_repeat + 1)
    collector = build_collector(cfg, parts.env, router.policy, total_frames=total)
    batches = iter(collector)
    # torchrl's Collector on its own env, for reference (its batches are not used)
    reference = iter(
        Collector(
            make_env(cfg.env, seed=cfg.train.seed + 1),
            router.policy,
            frames_per_batch=args.frames_per_batch,
            total_frames=total,
            auto_register_policy_transforms=False,
        )
    )
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.config} config: navigation x{n_agents}, "
        f"{args.num_envs} envs, {args.frames_per_batch} frames/iter, {args.epochs} epochs, minibatch {args.minibatch}, "
        f"{args.repeats} repeats x {args.iterations_per_repeat} iter, compile={args.compile}; "
        f"our collector: {type(collector).__name__}"
    )

    # warm-up (one full minibatch each, untimed): first-call allocations and lazy inits (and compiling
    # at the real minibatch size: a smaller one would recompile in the first timed update)
    batch = parts.reward_table(next(batches))
    next(reference)
    router.compute_advantages(batch)
    ppo_update(
        router, step, batch[:, : -(-args.minibatch // batch.shape[0])], num_epochs=1, minibatch_size=args.minibatch
    )
    floor.update(*(t[: args.minibatch] for t in batch_tensors(batch)), epochs=1, minibatch=args.minibatch)
    floor_advantages(floor, collect_floor.collect(), cfg.loss.gamma, cfg.loss.lmbda)

    def iteration() -> dict[str, float]:
        t0 = time.perf_counter()
        batch = next(batches)
        t1 = time.perf_counter()
        data = collect_floor.collect()
        t2 = time.perf_counter()
        next(reference)
        t3 = time.perf_counter()
        batch = parts.reward_table(batch)
        router.compute_advantages(batch)
        t4 = time.perf_counter()
        floor_advantages(floor, data, cfg.loss.gamma, cfg.loss.lmbda)
        t5 = time.perf_counter()
        tensors = batch_tensors(batch)
        floor.load_from(router)  # the weights that collected this batch
        with torch.no_grad():
            lp_check = (floor.log_prob(tensors[0], tensors[1]) - tensors[2]).abs().max().item()
        # the two updates alternate in chunks of epochs, so that a slow spell of a shared machine
        # falls on both sides of the ratio rather than on one
        t_floor = t_ours = 0.0
        for done in range(0, args.epochs, args.chunk_epochs):
            chunk = min(args.chunk_epochs, args.epochs - done)
            t6 = time.perf_counter()
            floor.update(*tensors, epochs=chunk, minibatch=args.minibatch)
            t7 = time.perf_counter()
            ppo_update(router, step, batch, num_epochs=chunk, minibatch_size=args.minibatch)
            t8 = time.perf_counter()
            t_floor, t_ours = t_floor + t7 - t6, t_ours + t8 - t7
        collector.update_policy_weights_()
        return {
            "collect": t1 - t0,
            "floor_collect": t2 - t1,
            "torchrl_collect": t3 - t2,
            "adv": t4 - t3,
            "floor_adv": t5 - t4,
            "update": t_ours,
            "floor": t_floor,
            "lp_check": lp_check,
        }

    keys = ("collect", "floor_collect", "torchrl_collect", "adv", "floor_adv", "update", "floor", "lp_check")
    rows: dict[str, list[float]] = {k: [] for k in keys}
    for rep in range(args.repeats):
        sums = dict.fromkeys(rows, 0.0)
        for _ in range(args.iterations_per_repeat):
            for k, v in iteration().items():
                sums[k] = max(sums[k], v) if k == "lp_check" else sums[k] + v / args.iterations_per_repeat
        for k, v in sums.items():
            rows[k].append(v)
        print(
            f"  repeat {rep + 1}: collect {sums['collect']:.2f}s (floor {sums['floor_collect']:.2f}s, "
            f"torchrl Collector {sums['torchrl_collect']:.2f}s)  "
            f"adv {sums['adv']:.3f}s (floor {sums['floor_adv']:.3f}s)  "
            f"update {sums['update']:.2f}s (floor {sums['floor']:.2f}s)  lp check {sums['lp_check']:.1e}"
        )
    collector.shutdown()

    med = {k: statistics.median(v) for k, v in rows.items()}
    n_steps = args.epochs * max(args.frames_per_batch // args.minibatch, 1)
    ours_iter = [c + a + u for c, a, u in zip(rows["collect"], rows["adv"], rows["update"])]
    floor_iter = [c + a + u for c, a, u in zip(rows["floor_collect"], rows["floor_adv"], rows["floor"])]

    def ratio(ours: list[float], theirs: list[float]) -> str:
        rs = [o / t for o, t in zip(ours, theirs)]
        return f"{statistics.median(rs):.2f}x  (repeats: {', '.join(f'{r:.2f}' for r in rs)})"

    print(f"\nper iteration (median of {args.repeats}; {n_steps} gradient steps)")
    print(f"  {'':<26}{'ours s':>9}{'floor s':>9}{'ms/step':>18}")
    print(f"  {'collection':<26}{med['collect']:9.2f}{med['floor_collect']:9.2f}")
    print(f"  {'reward table + GAE':<26}{med['adv']:9.3f}{med['floor_adv']:9.3f}")
    print(
        f"  {'update':<26}{med['update']:9.2f}{med['floor']:9.2f}"
        f"{1e3 * med['update'] / n_steps:9.2f}{1e3 * med['floor'] / n_steps:9.2f}"
    )
    print(f"  {'iteration':<26}{statistics.median(ours_iter):9.2f}{statistics.median(floor_iter):9.2f}")
    print(f"  torchrl's Collector (reference): {med['torchrl_collect']:.2f}s")
    print(f"  collection ratio ours/floor   {ratio(rows['collect'], rows['floor_collect'])}")
    print(f"  update ratio ours/floor       {ratio(rows['update'], rows['floor'])}")
    print(f"  iteration ratio ours/floor    {ratio(ours_iter, floor_iter)}")
    print(f"  torchrl Collector / floor     {ratio(rows['torchrl_collect'], rows['floor_collect'])}")
    print(f"  frames/s (ours, whole iteration)    {args.frames_per_batch / statistics.median(ours_iter):.0f}")
    print(f"  collect frames/s (ours)             {args.frames_per_batch / med['collect']:.0f}")
    print(f"  floor log-prob check (max |lp - old lp|)  {max(rows['lp_check']):.1e}")
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
