"""The one evaluation: exactly ``episodes`` episodes (deterministic unless ``log.eval_deterministic=false``),
their returns per group.

:func:`evaluate` runs a policy on any batched or unbatched env: the episodes are shared out between
the env's copies (copy ``i`` runs ``episodes // copies`` of them, one more for the first
``episodes % copies``), each copy resets itself when an episode ends, and only the first episodes
of each copy count, so short episodes are not over-represented.

:class:`Evaluator` is how a run evaluates: training (``log.eval_every``, the final evaluation),
``marl-ppo eval`` and a suite's final evaluation all use it, so the same policy gives the same
figure everywhere. One seed rule: the evaluation envs are built and reseeded from
``train.seed + EVAL_SEED_OFFSET`` before every evaluation, and the training's random streams
(global and VMAS's shared one) are restored afterwards.

>>> from marl_ppo.envs import EnvConfig, make_env
>>> env = make_env(EnvConfig(scenario="navigation", num_envs=3, max_steps=5, kwargs={"n_agents": 2}))
>>> result = evaluate(None, env, max_steps=5, groups=["agents"], episodes=7)
>>> result.episodes, sorted(result.returns), len(result.per_episode["agents"])
(7, ['agents'], 7)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from tensordict import TensorDictBase
from torchrl.envs import EnvBase, ExplorationType, set_exploration_type

from marl_ppo.config import Config
from marl_ppo.envs import EnvFactory, eval_num_envs, make_env
from marl_ppo.envs.kinds import env_kind
from marl_ppo.groups.specs import GroupKeys
from marl_ppo.models.recurrent import prime_env, state_spec
from marl_ppo.run.checkpoints import preserved_rng

__all__ = ["EvalResult", "evaluate", "Evaluator", "EVAL_SEED_OFFSET"]

EVAL_SEED_OFFSET = 10_000  # evaluation envs: train.seed + this, reseeded before every evaluation


@dataclass
class EvalResult:
    """Mean return per group over ``episodes`` completed episodes, and each episode's return.

    ``per_episode[group]`` lists the counted episodes' returns (mean over the group's agents), in
    the order they ended; the groups' lists are aligned (episodes end for every group at once).
    ``steps``: how many steps each env copy ran. When no episode ended within them (``episodes == 0``),
    there is no return: ``returns`` and ``per_episode`` are empty and ``partial_returns`` holds the
    return so far of the unfinished episodes (never to be reported as an episode's return).
    """

    returns: dict[str, float]
    episodes: int
    per_episode: dict[str, list[float]] = field(default_factory=dict)
    steps: int = 0
    partial_returns: dict[str, float] = field(default_factory=dict)

    @classmethod
    def merged(cls, results: Sequence[EvalResult]) -> EvalResult:
        """Several evaluations' episodes as one (a pool's snapshots, each some of the episodes)."""
        done = [r for r in results if r.episodes]
        per_episode = {g: [x for r in done for x in r.per_episode[g]] for g in (done[0].per_episode if done else {})}
        returns = {g: sum(xs) / len(xs) for g, xs in per_episode.items()}
        steps = sum(r.steps for r in results)
        return cls(returns, sum(r.episodes for r in done), per_episode, steps)

    def no_episode_message(self) -> str:
        """One line for an evaluation that finished no episode."""
        return (
            f"no episode finished within {self.steps} steps per env copy (the evaluation stops after "
            "(episodes per copy + 1) x max_steps): nothing to report; give a longer cap (env.max_steps, or "
            "marl-ppo eval --max-steps)"
        )


@torch.no_grad()
def evaluate(
    policy: Callable[[TensorDictBase], TensorDictBase] | None,
    env: EnvBase,
    max_steps: int,
    groups: Sequence[str],
    *,
    episodes: int,
    callback: Callable | None = None,
    deterministic: bool = True,
) -> EvalResult:
    """Runs ``policy`` (``None``: random actions) deterministically (``deterministic=False``: sampling its
    actions) until ``episodes`` episodes ended.

    Stops after ``(episodes per copy + 1) * max_steps`` steps at most (an env whose episodes never
    end); ``EvalResult.episodes`` is then the number that did. ``callback(env, td)`` is called after
    the reset and after every step but the last (e.g. to grab video frames).
    """
    copies = max(env.batch_size.numel(), 1)
    quota = torch.full((copies,), episodes // copies, dtype=torch.long)
    quota[: episodes % copies] += 1
    ended = torch.zeros(copies, dtype=torch.long)
    keys = {g: GroupKeys.for_group(g).episode_reward for g in groups}
    totals = {g: torch.zeros(()) for g in groups}
    counted: dict[str, list[torch.Tensor]] = {g: [] for g in groups}
    n = 0
    with set_exploration_type(ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM):
        td = env.reset()
        if callback is not None:
            callback(env, td)
        steps = 0
        for _ in range((int(quota.max()) + 1) * max_steps):
            steps += 1
            td = policy(td) if policy is not None else env.rand_action(td)
            td, td_next = env.step_and_maybe_reset(td)
            nxt = td.get("next")
            done = nxt.get("done").reshape(copies).cpu()
            count = done & (ended < quota)
            for g in groups:
                ep = nxt.get(keys[g]).mean(dim=(-2, -1)).reshape(copies).cpu()
                totals[g] += ep[count].sum()
                counted[g].append(ep[count])
            n += int(count.sum())
            ended += done.long()
            if bool((ended >= quota).all()):
                break
            if callback is not None:  # as torchrl's rollout: not after the last step
                callback(env, td)
            td = td_next
    if n == 0:  # no episode ended: no return, only what the unfinished episodes had so far
        return EvalResult({}, 0, steps=steps, partial_returns={g: nxt.get(keys[g]).mean().item() for g in groups})
    return EvalResult(
        {g: (totals[g] / n).item() for g in groups},
        n,
        {g: torch.cat(counted[g]).tolist() for g in groups},
        steps=steps,
    )


class Evaluator:
    """A run's evaluation of ``policy``: exactly ``episodes`` episodes on envs of the run's ``env`` section.

    The env copies (:func:`~marl_ppo.envs.eval_num_envs`) are built on first use, primed with the
    policy's recurrent state entries and moved to ``train.device``, and reseeded from
    ``train.seed + EVAL_SEED_OFFSET`` before every call, so every evaluation plays the same episodes;
    building and running them leaves the training's random streams as they were. ``env_fn`` builds
    the env instead of ``cfg.env`` (a notebook's factory); ``max_steps`` stands for ``env.max_steps``
    in the evaluation (the episodes' cap where the env has one, and the rollout's length). ``video``: the
    envs are built to draw frames (the env kind's ``render_kwargs``), for a callback that records them.
    """

    def __init__(
        self,
        cfg: Config,
        policy,
        groups: Sequence[str],
        *,
        episodes: int,
        env_fn: EnvFactory | None = None,
        max_steps: int | None = None,
        video: bool = False,
    ) -> None:
        if episodes < 1:
            raise ValueError(f"an evaluation needs episodes >= 1, got {episodes}")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"an evaluation needs max_steps >= 1, got {max_steps}")
        if max_steps is not None:  # the evaluation's episodes (VMAS, MPE) and its rollout are capped at it
            cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, max_steps=max_steps))
        self.cfg, self.policy, self.groups, self.episodes, self.env_fn = cfg, policy, list(groups), episodes, env_fn
        self.video = video
        self.max_steps = cfg.env.max_steps
        self.seed = cfg.train.seed + EVAL_SEED_OFFSET
        self.env: EnvBase | None = None

    def __call__(
        self,
        callback: Callable | None = None,
        policy=None,
        deterministic: bool | None = None,
        episodes: int | None = None,
    ) -> EvalResult:
        """Evaluates the run's policy, or ``policy`` (the same groups, e.g. against an opponent) on the same
        envs; ``deterministic=False`` samples the actions (a payoff matrix's games; ``None``:
        ``log.eval_deterministic``); ``episodes``: that many instead of the evaluator's own (a pool's share
        of them per snapshot)."""
        if deterministic is None:
            deterministic = self.cfg.log.eval_deterministic
        with preserved_rng():  # also VMAS's stream, which its training envs share with this one
            self._build()
            self.env.set_seed(self.seed)
            torch.manual_seed(self.seed)  # a random player's draws: the same at every evaluation
            return evaluate(
                self.policy if policy is None else policy,
                self.env,
                self.max_steps,
                self.groups,
                episodes=self.episodes if episodes is None else episodes,
                callback=callback,
                deterministic=deterministic,
            )

    def both_modes(
        self, callback: Callable | None = None, *, sample: bool = True, first: str | None = None
    ) -> dict[str, EvalResult]:
        """The evaluation in each mode, ``{"greedy": ..., "sampled": ...}`` (same envs, episodes and seeds),
        ``first`` (default: the configured mode) first, the one ``callback`` sees; ``sample=False``: greedy
        alone (a pool seat would play its snapshots when actions are sampled). A greedy policy that stalls
        where the sampled one scores shows here, beside it."""
        first = first or ("greedy" if self.cfg.log.eval_deterministic else "sampled")
        modes = sorted(("greedy", "sampled") if sample else ("greedy",), key=lambda m: m != first)
        return {m: self(callback=callback if m == first else None, deterministic=m == "greedy") for m in modes}

    @staticmethod
    def mode_metrics(results: dict[str, EvalResult]) -> dict[str, float]:
        """``eval/<group>/episode_reward_<mode>`` of :meth:`both_modes`' results."""
        return {f"eval/{g}/episode_reward_{m}": r for m, res in results.items() for g, r in res.returns.items()}

    def _build(self) -> None:
        if self.env is None:
            cfg = self.cfg
            n = eval_num_envs(cfg.env, self.episodes)
            env_cfg = env_kind(cfg.env.kind).for_video(cfg.env) if self.video else cfg.env
            env = make_env(env_cfg, seed=self.seed, num_envs=n, env_fn=self.env_fn)
            # on the policy's device, as the collector puts the training env
            self.env = prime_env(env, state_spec(self.policy)).to(cfg.train.device)

    def check_video(self) -> None:
        """Builds the evaluation envs and draws one frame, so that an env that cannot (a game without
        ``render_mode="rgb_array"``) fails in one line before training, not at the first evaluation."""
        try:
            with preserved_rng():
                self._build()
                self.env.reset()
                frame = self.env.render(mode="rgb_array", env_index=0)
        except (TypeError, ValueError, NotImplementedError, AttributeError) as err:
            raise ValueError(f"a video was asked for, but the evaluation's env cannot draw frames: {err}") from err
        if getattr(frame, "ndim", 0) != 3:
            raise ValueError(
                f"a video was asked for, but the evaluation's env drew {type(frame).__name__}, not an image"
            )

    def close(self) -> None:
        """Closes the evaluation envs (worker processes of ``env.parallel=true`` end here)."""
        if self.env is not None and not self.env.is_closed:
            self.env.close()
        self.env = None
