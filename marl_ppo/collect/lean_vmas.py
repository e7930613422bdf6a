"""A lean collector for VMAS: the same batches as torchrl's ``Collector``, without its per-step overhead.

Why it exists: on BenchMARL's navigation config (10 envs, 600 steps a batch) torchrl's ``Collector``
around a ``VmasEnv`` took 1.4-1.7x the time of VMAS stepped directly with the same policy as plain torch
modules (``examples/benchmarks/throughput.py``). Half of its time was outside VMAS and the matmuls: a
``TensorDict`` per agent per step, ``step_mdp`` and ``RewardSum`` copies, the policy's nested keys and a
``TanhNormal`` (checks, transforms) built every step, 600 carriers stacked at the end. This collector steps
the VMAS simulator (``env._env``) directly, calls each actor's own network on plain tensors, samples as
torchrl's distribution does (for a TanhNormal with the same tensor ops), keeps each step's tensors in lists
and stacks each key once per batch: about the floor's speed.

It takes only the case it can reproduce exactly (else :func:`lean_vmas_collector` returns ``None``,
:func:`lean_vmas_refusal` says why, and ``make_collector`` uses torchrl's ``Collector``): a ``VmasEnv`` on
the CPU with homogeneous groups and tensor observations, wrapped only in the ``RewardSum`` that ``make_env``
adds (after the ``StepCounter`` of ``env.time_limit=truncate``, whose count, ``truncated`` and ``done`` it
reproduces), and a policy whose actors are each a network followed by one non-composite distribution.
Resets call the same VMAS methods as torchrl's wrapper in the same order, so VMAS's random stream, the
global one (the policy's samples) and every key, shape, dtype and value match: ``tests/collect/test_collectors.py``
compares batches with torchrl's ``Collector`` over episode ends, partial resets and ``restart``. Its one host
read a step is the done column: VMAS resets an env by its index, and its own step reads the host about 20-30
times (asserts, collision culling; ``tests/core/test_host_reads.py``)

>>> from marl_ppo import GroupRouter, read_group_specs
>>> from marl_ppo.envs import EnvConfig, make_env
>>> env = make_env(EnvConfig(num_envs=4, max_steps=10))
>>> router = GroupRouter.from_specs(read_group_specs(env), hidden=(16,))
>>> collector = lean_vmas_collector(env, router.policy, frames_per_batch=40, total_frames=80)
>>> [tuple(b.batch_size) for b in collector]
[(4, 10), (4, 10)]
>>> collector.shutdown()
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import (
    CompositeDistribution,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
)
from torch.nn import functional as F
from torchrl.data import Composite
from torchrl.envs import EnvBase, RewardSum, StepCounter, TransformedEnv
from torchrl.modules.distributions import TanhNormal
from torchrl.modules.distributions.utils import sample_and_log_prob

from marl_ppo.groups.specs import GroupKeys

__all__ = ["LeanVmasCollector", "lean_vmas_collector", "lean_vmas_refusal"]

_RETURN = GroupKeys.NAMES["episode_reward"]  # what the env adapters' RewardSum writes under each group


class _Actor:
    """One group's actor as plain calls: network -> distribution parameters -> sample and log-prob."""

    def __init__(self, net_module: TensorDictModule, dist_module: ProbabilisticTensorDictModule) -> None:
        self.net = net_module.module
        self.obs_key = net_module.in_keys[0]
        self.group = self.obs_key[0]
        self.param_keys = list(net_module.out_keys)
        self.dist_module = dist_module
        self.action_key = dist_module.out_keys[0]
        self.log_prob_key = dist_module.log_prob_key
        # torchrl's TanhNormal (bounds -1..1) builds a transformed distribution on every call and
        # samples through three layers of torch.distributions: about 0.1 ms a step. The same ops on
        # the tensors directly (_tanh_normal_sample) give the same draws and values.
        dist_keys = [k[-1] if isinstance(k, tuple) else k for k in dist_module.dist_keys]
        self._loc_scale = [dict(zip(dist_keys, dist_module.in_keys)).get(k) for k in ("loc", "scale")]
        self._fast: bool | None = None  # decided on the first call, from the distribution it builds

    def __call__(self, obs: torch.Tensor) -> dict:
        out = self.net(obs)
        params = dict(zip(self.param_keys, (out,) if isinstance(out, torch.Tensor) else out, strict=True))
        if self._fast:
            action, log_prob = _tanh_normal_sample(*(params[k] for k in self._loc_scale))
        else:
            dist = self.dist_module.get_dist(params)  # reads params.get(key, None) for each dist keyword
            if self._fast is None:
                self._fast = _plain_tanh_normal(dist) and None not in self._loc_scale
            action, log_prob = sample_and_log_prob(dist, torch.Size(), reparameterize=dist.has_rsample)
        params[self.action_key] = action
        params[self.log_prob_key] = log_prob
        return params


def _plain_actors(policy: Any) -> list[_Actor] | str:
    """The policy's group actors as :class:`_Actor`, or why one is not a network + one distribution."""
    actors = list(policy.module) if type(policy) is TensorDictSequential else [policy]
    out = []
    for actor in actors:
        if not isinstance(actor, ProbabilisticTensorDictSequential) or len(actor.module) != 2:
            return f"the policy's {type(actor).__name__} is not a network followed by one distribution (e.g. recurrent)"
        net, dist = actor.module
        if (
            type(net).forward is not TensorDictModule.forward
            or len(net.in_keys) != 1
            or not isinstance(dist, ProbabilisticTensorDictModule)
        ):
            return f"an actor's network {type(net).__name__} is not a plain TensorDictModule on one input"
        if (
            not dist.return_log_prob
            or dist.num_samples is not None
            or getattr(dist, "safe", False)
            or getattr(dist, "_generator", None) is not None
            or getattr(dist, "_generator_key", None) is not None
            or issubclass(dist.distribution_class, CompositeDistribution)
            or len(dist.out_keys) != 2
            or not set(dist.in_keys) <= set(net.out_keys)
        ):  # e.g. an action mask read from the env
            return (
                f"an actor's distribution ({dist.distribution_class.__name__}) is composite, masked, seeded "
                "or samples differently from the plain path"
            )
        group = net.in_keys[0][0] if isinstance(net.in_keys[0], tuple) else None
        keys = [net.in_keys[0], *net.out_keys, *dist.out_keys]
        if (
            group is None
            or net.in_keys[0] != (group, "observation")
            or any(not isinstance(k, tuple) or len(k) != 2 or k[0] != group for k in keys)
        ):
            return f"an actor reads or writes keys off its group's (group, name) entries: {keys}"
        out.append(_Actor(net, dist))
    return out


def _plain_vmas(env: EnvBase):
    """``(VmasEnv, max_steps)`` if ``env`` is exactly ``VmasEnv`` + the episode-return ``RewardSum``,
    optionally after the ``StepCounter`` of ``env.time_limit=truncate`` (``max_steps`` is then its
    limit, else ``None``); for any other env, why not."""
    from torchrl.envs.libs.vmas import VmasWrapper

    if not isinstance(env, TransformedEnv) or not isinstance(env.base_env, VmasWrapper):
        return f"the env is a {type(env).__name__}, not a transformed VmasEnv"
    transforms = list(env.transform) if hasattr(env.transform, "__iter__") else [env.transform]
    max_steps = None
    if len(transforms) == 2 and _plain_step_counter(transforms[0]):
        max_steps = transforms.pop(0).max_steps
    if len(transforms) != 1 or type(transforms[0]) is not RewardSum:
        return (
            "the env has other transforms than the time limit and the episode returns: "
            f"{[type(t).__name__ for t in transforms]}"
        )
    base = env.base_env
    groups = base.group_map
    rsum = transforms[0]
    if list(rsum.in_keys) != [(g, "reward") for g in groups] or any(base.het_specs_map.values()):
        return "the groups are heterogeneous or the episode returns sum other keys"
    if not (base.continuous_actions or base.categorical_actions) or set(base.done_keys) != {"done", "terminated"}:
        return "one-hot actions or done keys other than done/terminated"
    if max_steps is not None and base._env.max_steps is not None:
        return "two time limits (VMAS's max_steps and a StepCounter)"
    if list(rsum.reset_keys) != ["_reset"] * len(groups):
        return "the episode returns reset on other keys than _reset"
    if any(isinstance(base.full_observation_spec[g, "observation"], Composite) for g in groups):
        return "a dict observation"
    return base, max_steps


def _plain_step_counter(t) -> bool:
    """torchrl's ``StepCounter`` with a limit, on the root keys, updating ``done`` (what the VMAS adapter adds)."""
    return (
        type(t) is StepCounter
        and t.max_steps is not None
        and t.update_done
        and list(t.step_count_keys) == ["step_count"]
        and list(t.truncated_keys) == ["truncated"]
        and list(t.done_keys) == ["done"]
        and list(t.reset_keys) == ["_reset"]
    )


def lean_vmas_collector(
    env: EnvBase, policy: Any, *, frames_per_batch: int, total_frames: int, device: str | torch.device | None = None
) -> "LeanVmasCollector | None":
    """A :class:`LeanVmasCollector` if it reproduces torchrl's ``Collector`` for ``env`` and ``policy``, else
    ``None`` (:func:`lean_vmas_refusal` says why)."""
    plan = _plan(env, policy, frames_per_batch, device)
    if isinstance(plan, str):
        return None
    base, max_steps, actors = plan
    return LeanVmasCollector(
        env, base, actors, policy, frames_per_batch=frames_per_batch, total_frames=total_frames, max_steps=max_steps
    )


def lean_vmas_refusal(
    env: EnvBase, policy: Any, *, frames_per_batch: int, device: str | torch.device | None = None
) -> str | None:
    """Why :func:`lean_vmas_collector` declines ``env`` and ``policy`` (one line), or ``None`` if it takes them."""
    plan = _plan(env, policy, frames_per_batch, device)
    return plan if isinstance(plan, str) else None


def _plan(env: EnvBase, policy: Any, frames_per_batch: int, device) -> tuple | str:
    plain = _plain_vmas(env)
    if isinstance(plain, str):
        return plain
    actors = _plain_actors(policy)
    if isinstance(actors, str):
        return actors
    base, max_steps = plain
    # CPU only: on CUDA it has never run (no GPU was at hand to compare it with torchrl's collector there)
    if base.device.type != "cpu" or (device is not None and torch.device(device).type != "cpu"):
        return "the env or the policy is not on the CPU (the lean path is compared with torchrl's on the CPU only)"
    if frames_per_batch % base.batch_size.numel():
        return f"frames_per_batch={frames_per_batch} is not a multiple of the {base.batch_size.numel()} envs"
    if sorted(a.group for a in actors) != sorted(base.group_map):
        return "the policy's actors are not one per group of the env"
    return base, max_steps, actors


class LeanVmasCollector:
    """Collects ``[num_envs, T]`` batches from a VMAS env, exactly as torchrl's ``Collector`` would.

    Build it with :func:`lean_vmas_collector`. The interface is :class:`~marl_ppo.collect.collectors.FlatCollector`'s.
    """

    description = "lean VMAS collector (direct, in this process)"
    declined = None

    def __init__(
        self,
        env: TransformedEnv,
        base,
        actors: list[_Actor],
        policy: Any,
        *,
        frames_per_batch: int,
        total_frames: int,
        max_steps: int | None = None,
    ) -> None:
        self.env, self.base, self.actors, self.policy = env, base, actors, policy
        self.max_steps = max_steps  # the StepCounter's limit (env.time_limit=truncate), or None
        self.sim = base._env  # the VMAS simulator
        self.n_envs = base.batch_size.numel()
        self.steps = frames_per_batch // self.n_envs
        self.total_frames = total_frames
        self.frames = 0
        self.groups = {g: [base.agent_names_to_indices_map[a] for a in agents] for g, agents in base.group_map.items()}
        self.info_keys = {
            g: list(base.full_observation_spec[g, "info"].keys())
            if (g, "info") in base.full_observation_spec.keys(True)
            else []
            for g in self.groups
        }
        self.n_agents = sum(len(idx) for idx in self.groups.values())
        self._next_traj = 0
        first = self._reset_all()
        # torchrl's Collector runs the policy once on its first carrier to find the policy's output
        # keys; that call draws from the global RNG, so it is made here too (same draws after it)
        with torch.no_grad():
            policy(first.copy())

    # -- the FlatCollector interface ---------------------------------------------------------

    def __iter__(self) -> Iterator[TensorDictBase]:
        while self.total_frames < 0 or self.frames < self.total_frames:
            batch = self._rollout()
            self.frames += batch.numel()
            yield batch

    def update_policy_weights_(self) -> None:
        """A no-op: the policy runs in this process, on the trainer's own modules."""

    def shutdown(self) -> None:
        if not self.env.is_closed:
            self.env.close()

    def restart(self, seed: int) -> bool:
        """Reseeds the env and resets every episode, as ``Collector.set_seed`` + ``Collector.reset`` do."""
        self.env.set_seed(seed)
        self._reset_all()
        return True

    # -- collection --------------------------------------------------------------------------

    def _new_traj_ids(self, n: int) -> torch.Tensor:
        ids = torch.arange(self._next_traj, self._next_traj + n)
        self._next_traj += n
        return ids

    def _reset_all(self) -> TensorDictBase:
        """A full reset through torchrl's env (as the collector's start and ``reset()`` do); new trajectory ids."""
        td = self.env.reset()
        self.state = {"done": td.get("done"), "terminated": td.get("terminated")}
        if self.max_steps is not None:
            self.state.update(step_count=td.get("step_count"), truncated=td.get("truncated"))
        for g in self.groups:
            self.state[g] = {
                "observation": td.get((g, "observation")),
                _RETURN: td.get((g, _RETURN)),
                "info": {k: td.get((g, "info", k)) for k in self.info_keys[g]},
            }
        self.traj_ids = self._new_traj_ids(self.n_envs)
        return td

    def _read(self, obs, infos, rews=None) -> dict:
        """VMAS's per-agent lists as each group's ``[B, n_agents, ...]`` tensors (torchrl's ``read_*``)."""
        out = {}
        for g, idx in self.groups.items():
            gd = {"observation": torch.stack([obs[i] for i in idx], 1)}
            if rews is not None:
                gd["reward"] = torch.stack([_column(rews[i]) for i in idx], 1)
            gd["info"] = {
                k: torch.stack([_column(infos[i][k].to(torch.float32)) for i in idx], 1) for k in self.info_keys[g]
            }
            out[g] = gd
        return out

    def _reset_done(self, done: torch.Tensor, nxt: dict, ended: list[int]) -> dict:
        """The next step's root state: ``nxt`` where an env goes on, its reset where it was done (torchrl's
        ``maybe_reset``: ``VmasEnv._reset`` then ``where(~reset, ...)``); ``ended``: those envs' indices."""
        mask = done.squeeze(-1)
        if len(ended) == self.n_envs:
            self.sim.reset(return_observations=False)
        else:
            for i in ended:
                self.sim.reset_at(i, return_observations=False)
        obs, dones, infos = self.sim.get_from_scenario(
            get_observations=True, get_infos=True, get_rewards=False, get_dones=True
        )
        reset = self._read(obs, infos)
        dones = _column(dones)
        state = {
            "done": torch.where(done, dones, nxt["done"]),
            "terminated": torch.where(done, dones, nxt["terminated"]),
        }
        if self.max_steps is not None:  # StepCounter._reset: count 0, truncated (False), done := truncated
            count = torch.where(done, 0, nxt["step_count"])
            truncated = count >= self.max_steps
            state.update(
                step_count=count,
                truncated=torch.where(done, truncated, nxt["truncated"]),
                done=torch.where(done, truncated, nxt["done"]),
            )
        for g in self.groups:
            m = mask.view(-1, 1, 1)
            state[g] = {
                "observation": torch.where(m, reset[g]["observation"], nxt[g]["observation"]),
                _RETURN: torch.where(m, 0.0, nxt[g][_RETURN]),
                "info": {k: torch.where(m, reset[g]["info"][k], nxt[g]["info"][k]) for k in self.info_keys[g]},
            }
        return state

    @torch.no_grad()
    def _rollout(self) -> TensorDictBase:
        roots, nexts, policy_outs, traj = [], [], [], []
        for _ in range(self.steps):
            state = self.state
            outs = {a.group: a(state[a.group]["observation"]) for a in self.actors}  # in the policy's order
            by_agent = [None] * self.n_agents
            for a in self.actors:
                for i, action in zip(self.groups[a.group], outs[a.group][a.action_key].unbind(1)):
                    by_agent[i] = action
            obs, rews, dones, infos = self.sim.step(by_agent)
            done = _column(dones)
            nxt = {"done": done, "terminated": done.clone()}
            if self.max_steps is not None:  # StepCounter._step: truncated at the limit, done |= truncated
                count = state["step_count"] + 1
                truncated = count >= self.max_steps
                done = truncated | done
                nxt.update(done=done, step_count=count, truncated=truncated)
            for g, gd in self._read(obs, infos, rews).items():
                gd[_RETURN] = state[g][_RETURN] + gd["reward"]  # RewardSum
                nxt[g] = gd
            roots.append(state)
            nexts.append(nxt)
            policy_outs.append(outs)
            traj.append(self.traj_ids)
            ended = [i for i, d in enumerate(done.squeeze(-1).tolist()) if d]  # the one host read (reset_at(i))
            if ended:  # as torchrl's Collector: new trajectory ids for the envs that end here
                self.state = self._reset_done(done, nxt, ended)
                self.traj_ids = self.traj_ids.masked_scatter(done.squeeze(-1), self._new_traj_ids(len(ended)))
            else:  # step_mdp: the next state becomes the root (its reward is not read there)
                self.state = nxt
        return self._stack(roots, nexts, policy_outs, traj)

    def _stack(self, roots, nexts, policy_outs, traj) -> TensorDictBase:
        """One ``[B, T]`` TensorDict, with the layout, keys and batch sizes of torchrl's collector output."""
        B, T = self.n_envs, self.steps
        dev = self.base.device

        def stack(seq):
            return torch.stack(seq, 1)

        def group_td(steps: list[dict], g: str, extra: list[dict] | None, keys) -> TensorDict:
            n = len(self.groups[g])
            fields = {k: stack([s[g][k] for s in steps]) for k in keys}
            if extra is not None:
                for k in extra[0]:
                    fields[k[-1]] = stack([e[k] for e in extra])
            info = {k: stack([s[g]["info"][k] for s in steps]) for k in self.info_keys[g]}
            if info:
                fields["info"] = TensorDict(info, batch_size=[B, T, n], device=dev)
            return TensorDict(fields, batch_size=[B, T, n], device=dev)

        flags = ["done", "terminated"] + (["step_count", "truncated"] if self.max_steps is not None else [])
        root = {k: stack([s[k] for s in roots]) for k in flags}
        nxt = {k: stack([s[k] for s in nexts]) for k in flags}
        for g in self.groups:
            root[g] = group_td(roots, g, [o[g] for o in policy_outs], ("observation", _RETURN))
            nxt[g] = group_td(nexts, g, None, ("observation", "reward", _RETURN))
        root["next"] = TensorDict(nxt, batch_size=[B, T], device=dev)
        root["collector"] = TensorDict({"traj_ids": stack(traj)}, batch_size=[B, T], device=dev)
        return TensorDict(root, batch_size=[B, T], device=dev)


def _plain_tanh_normal(dist) -> bool:
    """Whether ``dist`` samples as :func:`_tanh_normal_sample` does: torchrl's TanhNormal (or a subclass
    that keeps its sampling) with bounds -1..1, no ``tanh_loc``, the safe tanh, one event dim."""
    from torchrl.modules.distributions.continuous import SafeTanhTransform

    return (
        isinstance(dist, TanhNormal)
        and dist.has_rsample
        and type(dist).rsample_and_log_prob is TanhNormal.rsample_and_log_prob
        and not dist.tanh_loc
        and not bool(dist.non_trivial_max)
        and not bool(dist.non_trivial_min)
        and type(dist._t) is SafeTanhTransform
        and dist._event_dims == 1
        and not dist.base_dist.base_dist._validate_args
    )


_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def _tanh_normal_sample(loc: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``TanhNormal(loc, scale).rsample_and_log_prob()`` (bounds -1..1), op for op: ``Normal.rsample``,
    torchrl's safe tanh, ``Normal.log_prob`` summed over the event dim, minus ``TanhTransform``'s
    log-Jacobian summed."""
    x = loc + torch.empty(loc.shape, dtype=loc.dtype, device=loc.device).normal_() * scale
    lim = 1.0 - torch.finfo(x.dtype).resolution
    action = x.tanh().clamp(-lim, lim)
    normal = -((x - loc) ** 2) / (2 * scale**2) - scale.log() - _LOG_SQRT_2PI
    log_det = 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))
    return action, normal.sum(-1) - log_det.sum(-1)


def _column(x: torch.Tensor) -> torch.Tensor:
    """``[B] -> [B, 1]`` (torchrl's ``_selective_unsqueeze`` for a VMAS reward or done)."""
    return x.unsqueeze(-1) if x.ndim == 1 else x
