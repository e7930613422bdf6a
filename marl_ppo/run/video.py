"""Episode videos: one deterministic episode rendered to an animated GIF.

The env draws each frame itself, headless: VMAS (``render(mode="rgb_array", env_index=i)``) and the
PettingZoo copies (each game built with ``render_mode="rgb_array"``, drawn by
:class:`~marl_ppo.envs.game_copies.GameCopies` or the adapter's ``SerialEnv``). Pillow writes the
GIF, so no video codec is needed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tensordict import TensorDictBase
from torchrl.envs import EnvBase

__all__ = ["FrameRecorder", "save_gif", "eval_recorder"]


class FrameRecorder:
    """A rollout callback (``env.rollout(..., callback=recorder)``) keeping one env's rendered frames.

    >>> from torchrl.envs.libs.vmas import VmasEnv
    >>> env = VmasEnv("navigation", num_envs=2, seed=0, max_steps=3)
    >>> recorder = FrameRecorder()
    >>> _ = env.rollout(3, callback=recorder)  # torchrl calls it after every step but the last
    >>> len(recorder.frames), recorder.frames[0].shape
    (2, (700, 700, 3))
    """

    def __init__(self, env_index: int = 0) -> None:
        self.env_index = env_index
        self.frames: list[np.ndarray] = []
        self.ended = False

    def __call__(self, env: EnvBase, td: TensorDictBase | None = None) -> None:
        """Draws copy ``env_index`` until its first episode ends (``td``'s ``("next", "done")``): a copy
        that plays several episodes of an evaluation, as PettingZoo's do, is recorded for one."""
        if self.ended:
            return
        done = td.get(("next", "done"), None) if td is not None else None
        if done is not None and bool(done.reshape(max(env.batch_size.numel(), 1), -1)[self.env_index].any()):
            self.ended = True  # the env has already reset this copy: the next frame is a new episode's
            return
        self.frames.append(env.render(mode="rgb_array", env_index=self.env_index))

    def save(self, path: str | Path, *, fps: int = 20) -> Path:
        return save_gif(self.frames, path, fps=fps)


def save_gif(frames: list[np.ndarray], path: str | Path, *, fps: int = 20) -> Path:
    """Writes RGB frames (``[H, W, 3]`` uint8) as a looping animated GIF."""
    from PIL import Image

    if not frames:
        raise ValueError("no frames to write")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    tmp = path.with_name(path.name + ".tmp")
    images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    tmp.replace(path)
    return path


def eval_recorder(path: str | None, env_cfg) -> FrameRecorder | None:
    """``marl-ppo eval --video PATH``'s recorder (``None`` without a path); an env that cannot draw is
    refused in one line, naming why."""
    if not path:
        return None
    from marl_ppo.envs.kinds import video_refusal

    why = video_refusal(env_cfg)
    if why is not None:
        raise ValueError(f"--video: this run's {why}")
    return FrameRecorder()
