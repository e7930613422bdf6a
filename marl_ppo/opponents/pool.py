"""Snapshot pools: a seat that plays frozen past versions of a training group, or its latest policy.

``opponents: {player_2: pool:player_1}`` makes ``player_2`` a self-play seat of ``player_1``'s
networks (as ``self:player_1`` does) whose policy is drawn **per env copy and per episode**: with
probability ``pool.latest_share`` the latest policy (those steps train the shared networks, as in
``self``), otherwise one of the pool's frozen snapshots of ``player_1``'s policy (those steps train
nothing). ``opponents: {agent: pool}`` keeps the group's own networks and pools its own past
policies. A snapshot is taken every ``pool.every`` iterations (and one at the start); past
``pool.size`` snapshots the oldest is dropped (``pool.drop=lowest``: the lowest-rated but the newest).

Every snapshot has an Elo rating against the latest policy, updated after each batch from the
episodes it played against the latest policy (:func:`~marl_ppo.opponents.ratings.elo_update`); a new
snapshot starts at the latest policy's rating. ``pool.draw=rating`` draws snapshot ``k`` with weight
``expected_score(rating_k, rating_latest)``, its chance of beating the latest policy: the pool's
hardest opponents most often (as prioritised fictitious self-play weights them).

The snapshots are one set of stacked parameters ``[K, ...]``: every env's snapshot runs in one
vmapped call of the network (:class:`SnapshotNet`), not one module call per env. A policy with a
trunk (CNN, DeepSets, GNN, a chain, a GRU/LSTM) is snapshotted whole: each of its plain networks makes
one such call (:class:`SnapshotPart`; a GRU/LSTM cell, which torch cannot vmap, one call per snapshot
in play). A recurrent snapshot's state lives in the seat's own state entries: a copy plays one policy
per episode and the state restarts with the episode, so where a snapshot plays, its next state is
the one stored. Which opponent an env drew is recorded in the batch
(``(group, "opponent")``: -1 the latest policy, ``k`` snapshot slot ``k``), and the seat's loss mask
``(group, "train_mask")`` is its env mask restricted to the episodes against the latest policy. In a
deterministic evaluation a pool seat plays the latest policy.

Written by hand: torchrl has no opponent pool, and its collectors take one policy.

>>> import torch
>>> net = torch.nn.Linear(3, 2)
>>> snapshots = SnapshotNet(net)
>>> snapshots.add(dict(net.named_parameters()), size=4); len(snapshots)
1
>>> snapshots.choice = torch.zeros(5, dtype=torch.long)
>>> # the vmapped call and the plain module agree to float32 rounding (the last bits vary by CPU)
>>> torch.allclose(snapshots(torch.ones(5, 1, 3)), net(torch.ones(5, 1, 3)), rtol=1e-5, atol=1e-6)
True
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictParams
from torch import nn
from torchrl.envs.utils import ExplorationType, exploration_type

from marl_ppo.groups.specs import GroupKeys, GroupSpec
from marl_ppo.opponents.ratings import elo_update, expected_score

__all__ = ["SnapshotNet", "SnapshotPart", "PoolPlayer", "LearnerSeating", "TRAIN_MASK", "OPPONENT"]

TRAIN_MASK = "train_mask"  # (group, TRAIN_MASK): the pool seat's loss mask
OPPONENT = "opponent"  # (group, OPPONENT): -1 the latest policy, k >= 0 snapshot slot k, -2 - j fixed player j


class SnapshotNet(nn.Module):
    """Frozen snapshots of one network, stacked ``[K, ...]``; runs snapshot ``choice[e]`` for env copy ``e``.

    ``choice`` (one index per env copy) is set by :class:`PoolPlayer` right before each call. The
    network itself (``template``) is not registered here: its live parameters belong to the router.
    """

    def __init__(self, template: nn.Module) -> None:
        super().__init__()
        self._template = (template,)
        self.params: dict[str, torch.Tensor] = {}
        self.taken_at: list[int] = []
        self.ratings: list[float] = []  # each snapshot's Elo rating against the latest policy
        self.latest_rating = 1000.0
        self.choice = torch.zeros(0, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.taken_at)

    @property
    def template(self) -> nn.Module:
        """The network whose snapshots these are (its live parameters are the router's)."""
        return self._template[0]

    def add(
        self, params: Mapping[str, torch.Tensor], *, size: int, iteration: int = 0, drop: str = "oldest"
    ) -> int | None:
        """Appends a detached copy of ``params`` rated as the latest policy; past ``size`` drops the oldest
        snapshot (``drop="lowest"``: the lowest-rated one, the new one excepted) and returns its slot (the
        later ones move down by one)."""
        new = {k: v.detach().clone().unsqueeze(0) for k, v in params.items()}
        self.params = {k: torch.cat([self.params[k], v]) if self.params else v for k, v in new.items()}
        self.taken_at.append(int(iteration))
        self.ratings.append(self.latest_rating)
        if len(self.taken_at) > size:
            out = 0 if drop == "oldest" else min(range(len(self) - 1), key=self.ratings.__getitem__)
            keep = [i for i in range(len(self)) if i != out]
            self.params = {k: v[keep].clone() for k, v in self.params.items()}
            self.taken_at.pop(out)
            self.ratings.pop(out)
            return out
        return None

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.run(self.template, self.params, inputs)

    def run(self, net: nn.Module, params: Mapping[str, torch.Tensor], inputs: tuple) -> torch.Tensor:
        """``net`` with each snapshot's ``params`` on ``inputs`` (env copies first), snapshot ``choice[e]``'s
        output for env copy ``e``."""

        per_agent = _holds_tensordict_params(net)

        def call(p: dict[str, torch.Tensor]) -> torch.Tensor:
            if not per_agent:
                return torch.func.functional_call(net, p, inputs)
            # torchrl's per-agent networks keep their weights in a TensorDictParams, into which functional_call
            # swaps nothing (the live weights would play): tensordict's to_module swaps them. Not under vmap:
            # leaving the context there puts new Parameter objects in the live network, which the optimizer
            # then no longer updates
            with TensorDict(dict(p)).unflatten_keys(".").to_module(net):
                return net(*inputs)

        # torch has no vmap rule for aten::gru/lstm, and per-agent weights are swapped outside vmap: one call per
        # snapshot in play
        if isinstance(net, nn.RNNBase) or per_agent:
            used = self.choice.unique()
            calls = [call({k: v[i] for k, v in params.items()}) for i in used.tolist()]
            out = _stacked(calls)  # [used, ...]
            index = torch.searchsorted(used, self.choice)
        else:
            out = torch.vmap(call)(dict(params))  # [K, *B, ...]: every snapshot on every env, one call
            index = self.choice
        copies = self.choice.numel()

        def pick(y: torch.Tensor) -> torch.Tensor:  # env copies lead every output's rows (a GRU's state: 1 layer)
            flat = y.reshape(y.shape[0], copies, -1)
            return flat[index, torch.arange(copies, device=y.device)].reshape(y.shape[1:])

        return _each(pick, out)  # each output: (loc, scale), an LSTM's (y, (h, c))

    def state(self) -> dict:
        return {
            "params": {k: v.clone() for k, v in self.params.items()},
            "taken_at": list(self.taken_at),
            "ratings": list(self.ratings),
            "latest_rating": self.latest_rating,
        }

    def load(self, state: Mapping) -> None:
        self.params = {k: v.clone() for k, v in state["params"].items()}
        self.taken_at = [int(i) for i in state["taken_at"]]
        # a checkpoint from before ratings: every player at the start's 1000
        self.ratings = [float(r) for r in state.get("ratings", [1000.0] * len(self.taken_at))]
        self.latest_rating = float(state.get("latest_rating", 1000.0))

    def rate(self, games: list[int], scores: list[float]) -> None:
        """One batch of games against the latest policy (per snapshot: games played, score in all)."""
        self.ratings, self.latest_rating = elo_update(self.ratings, self.latest_rating, games, scores)


def _stacked(outputs: list):
    """Outputs of one call each (a tensor, or tuples of them, nested): their tensors stacked, in the same nesting."""
    if isinstance(outputs[0], tuple):
        return tuple(_stacked([out[i] for out in outputs]) for i in range(len(outputs[0])))
    return torch.stack(outputs)


def _each(fn, out):
    """``fn`` on each tensor of ``out`` (a tensor, or tuples of them, nested), in the same nesting."""
    return tuple(_each(fn, y) for y in out) if isinstance(out, tuple) else fn(out)


class SnapshotPart(nn.Module):
    """One plain network of a policy whose snapshots a :class:`SnapshotNet` holds (its template: the whole
    policy), run as the snapshots' ``path`` entries: a CNN or a chain's parts, each in its own vmapped call."""

    def __init__(self, snapshots: SnapshotNet, path: str, net: nn.Module) -> None:
        super().__init__()
        self._held, self.path = (snapshots, net), path  # neither registered: no parameters of its own

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        snapshots, net = self._held
        n = len(self.path) + 1
        params = {k[n:]: v for k, v in snapshots.params.items() if k.startswith(self.path + ".")}
        return snapshots.run(net, params, inputs)


class LearnerSeating:
    """``pool.seating=learner``: which of the seats pooling one group's networks plays the latest policy
    in each env copy's episode, one drawn uniformly (global torch RNG) wherever an episode starts.

    The seats' players run in ``seats``' order in one policy call: the first draws, the others read
    the same draw (:meth:`PoolPlayer.forward`).

    >>> seating = LearnerSeating(["player_1", "player_2"])
    >>> starts = torch.ones(6, dtype=torch.bool)  # every env copy starts an episode
    >>> first, second = seating.plays_latest("player_1", starts), seating.plays_latest("player_2", starts)
    >>> bool((first ^ second).all())  # exactly one seat per env copy
    True
    """

    def __init__(self, seats: list[str]) -> None:
        self.seats = list(seats)
        self.learner = torch.zeros(0, dtype=torch.long)

    def plays_latest(self, seat: str, starts: torch.Tensor) -> torch.Tensor:
        """Per env copy: whether ``seat`` plays the latest policy in the episode under way."""
        if self.learner.numel() != starts.numel():  # the first call (or another number of env copies)
            self.learner = torch.zeros(starts.shape, dtype=torch.long, device=starts.device)
        if seat == self.seats[0]:
            drawn = torch.randint(0, len(self.seats), starts.shape).to(starts.device)
            self.learner = torch.where(starts, drawn, self.learner)
        return self.learner == self.seats.index(seat)


class PoolPlayer(TensorDictModuleBase):
    """A pool seat in the collection policy: the latest policy or a snapshot, per env copy and episode.

    ``live`` is the seat's actor on the shared networks (the router trains it), ``frozen`` the same
    actor around a :class:`SnapshotNet`; ``env_mask`` the env's own mask entry of the seat, if any.
    Draws use the global torch RNG, as the policy's sampling does (a checkpoint's RNG states cover
    both): a new draw wherever ``is_init`` starts an episode.
    """

    def __init__(
        self,
        spec: GroupSpec,
        live: nn.Module,
        frozen: nn.Module,
        snapshots: SnapshotNet,
        *,
        source: str,
        latest_share: float,
        size: int,
        every: int,
        env_mask=None,
        fixed: list[nn.Module] = (),
        fixed_share: float = 0.0,
        draw: str = "uniform",
        drop: str = "oldest",
    ) -> None:
        super().__init__()
        self.spec, self.live, self.frozen, self.snapshots = spec, live, frozen, snapshots
        self.source, self.latest_share, self.size, self.every = source, latest_share, size, every
        self.fixed, self.fixed_share = nn.ModuleList(fixed), fixed_share  # players beside the snapshots
        self.draw, self.drop = draw, drop
        fixed_keys = [k for player in self.fixed for k in player.in_keys]
        self.in_keys = [*live.in_keys, *fixed_keys, "is_init", *([env_mask] if env_mask is not None else [])]
        self.out_keys = [*live.out_keys, (spec.name, TRAIN_MASK), (spec.name, OPPONENT)]
        # what the policy carries to the next step (a recurrent policy's state): the snapshot's where it plays
        self.carried = [k for k in live.out_keys if isinstance(k, tuple) and k[0] == "next"]
        self.assignment = torch.zeros(0, dtype=torch.long)
        self.env_mask = env_mask  # the env's own mask of the seat (a turn-based game's turns), if it has one
        self.seating: LearnerSeating | None = None  # pool.seating=learner: set by the run's build

    def snapshot(self, iteration: int) -> None:
        """Adds the source group's policy network as it stands (every ``every`` iterations, and at 0).

        Episodes under way keep their opponent: past ``size``, the slots after the dropped snapshot move
        down by one, and an episode against the dropped snapshot itself goes on with the latest policy
        (its remaining steps train)."""
        params = dict(self.snapshots.template.named_parameters())
        out = self.snapshots.add(params, size=self.size, iteration=iteration, drop=self.drop)
        if out is not None:
            a = self.assignment
            self.assignment = torch.where(a == out, -1, torch.where(a > out, a - 1, a))

    def after_update(self, iteration: int, batch: TensorDictBase | None = None) -> dict[str, float]:
        """Rates the snapshots on ``batch``'s games, then takes this iteration's snapshot; returns the ratings'
        metrics (``pool/<group>/elo_latest``, ``elo_snapshots_mean``, ``elo_snapshots_max``)."""
        if batch is not None:
            self.snapshots.rate(*self.games(batch))
        if iteration % self.every == 0:
            self.snapshot(iteration)
        r, g = self.snapshots.ratings, self.spec.name
        return {
            f"pool/{g}/elo_latest": self.snapshots.latest_rating,
            f"pool/{g}/elo_snapshots_mean": sum(r) / len(r),
            f"pool/{g}/elo_snapshots_max": max(r),
        }

    def games(self, batch: TensorDictBase) -> tuple[list[int], list[float]]:
        """Per snapshot: the episodes that ended in ``batch`` with it in this seat and the latest policy in
        every other pool seat, and its score in them (its return above every other group's: 1, tied: 1/2)."""
        nxt = batch.get("next")
        done = nxt.get("done").squeeze(-1)
        drawn = batch.get((self.spec.name, OPPONENT))[..., 0][done]
        others_latest = torch.ones_like(drawn, dtype=torch.bool)
        returns = {}
        for g in {k[0] for k in nxt.keys(True) if isinstance(k, tuple) and k[-1] == "episode_reward"}:
            returns[g] = nxt.get(GroupKeys.for_group(g).episode_reward)[done].mean(dim=(-2, -1))
            if g != self.spec.name and (g, OPPONENT) in batch.keys(True):
                others_latest &= batch.get((g, OPPONENT))[..., 0][done] == -1
        mine = returns.pop(self.spec.name)
        if not returns:  # no other group to have played against
            return [0] * len(self.snapshots), [0.0] * len(self.snapshots)
        best = torch.stack(list(returns.values())).max(0).values
        score = (mine > best).float() + 0.5 * (mine == best).float()
        games, scores = [], []
        for k in range(len(self.snapshots)):
            played = (drawn == k) & others_latest
            games.append(int(played.sum()))
            scores.append(float(score[played].sum()))
        return games, scores

    def _draw(self, copies: int, device: torch.device) -> torch.Tensor:
        share = torch.rand(copies)
        if self.draw == "rating" and len(self.snapshots):  # each snapshot's chance of beating the latest policy
            latest = self.snapshots.latest_rating
            weights = torch.tensor([expected_score(r, latest) for r in self.snapshots.ratings])
            slot = torch.multinomial(weights, copies, replacement=True)
        else:
            slot = torch.randint(0, max(len(self.snapshots), 1), (copies,))
        drawn = torch.where((share < self.latest_share) | (len(self.snapshots) == 0), -1, slot)
        if len(self.fixed):  # the next fixed_share of the unit interval: fixed player j, coded -2 - j
            player = -2 - torch.randint(0, len(self.fixed), (copies,))
            fixed = (share >= self.latest_share) & (share < self.latest_share + self.fixed_share)
            drawn = torch.where(fixed, player, drawn)
        return drawn.to(device)

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        g, copies = self.spec.name, td.batch_size.numel()
        if exploration_type() == ExplorationType.DETERMINISTIC:
            assignment = torch.full((copies,), -1, device=td.device)  # an evaluation: the latest policy
        else:
            if self.assignment.numel() != copies:
                self.assignment = torch.full((copies,), -1, device=td.device)
            starts = td.get("is_init").reshape(copies)
            drawn = self._draw(copies, td.device)
            if self.seating is not None:  # this episode's learner seat plays the latest policy
                drawn = torch.where(self.seating.plays_latest(g, starts), -1, drawn)
            self.assignment = torch.where(starts, drawn, self.assignment)
            assignment = self.assignment
        td = self.live(td)
        snapshot = assignment >= 0
        if len(self.snapshots) and bool(snapshot.any()):
            self.snapshots.choice = assignment.clamp(min=0)
            other = self.frozen(td.select(*self.frozen.in_keys, strict=False).copy())
            for key in (self.spec.keys.action, self.spec.keys.log_prob, *self.carried):
                ours = td.get(key)
                pick = snapshot.reshape(*td.batch_size, *([1] * (ours.ndim - td.batch_dims)))
                td.set(key, torch.where(pick, other.get(key), ours))
        for j, player in enumerate(self.fixed):  # log-probs stay the live policy's: those steps train nothing
            mine = assignment == -2 - j
            if bool(mine.any()):
                other = player(td.select(*player.in_keys, strict=False).copy())
                ours = td.get(self.spec.keys.action)
                pick = mine.reshape(*td.batch_size, *([1] * (ours.ndim - td.batch_dims)))
                td.set(self.spec.keys.action, torch.where(pick, other.get(self.spec.keys.action), ours))
        n = self.spec.n_agents
        per_agent = (*td.batch_size, n)
        env_mask = (
            td.get(self.env_mask)
            if self.env_mask is not None
            else torch.ones(per_agent, dtype=torch.bool, device=td.device)
        )
        latest = (assignment == -1).reshape(*td.batch_size, 1).expand(per_agent)
        td.set((g, TRAIN_MASK), env_mask & latest)
        td.set((g, OPPONENT), assignment.reshape(*td.batch_size, 1).expand(per_agent).clone())
        return td


_PER_AGENT: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()


def _holds_tensordict_params(net: nn.Module) -> bool:
    """Whether ``net`` keeps weights in a ``TensorDictParams`` (torchrl's per-agent networks); read once per network,
    not at every step a pool seat plays."""
    if net not in _PER_AGENT:
        _PER_AGENT[net] = any(isinstance(m, TensorDictParams) for m in net.modules())
    return _PER_AGENT[net]
