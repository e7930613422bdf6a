"""The options' common ground: :class:`ConfigError` and the checks every options dataclass makes.

At the bottom of the package: each layer's own options (``envs.options.EnvConfig``,
``models.options.ModelConfig``) and the run's :mod:`marl_ppo.config` raise the same error, with
the key, the value and what is allowed.

>>> choice("loss.algorithm", "ppo", ("mappo", "ippo"))
Traceback (most recent call last):
...
marl_ppo.options.ConfigError: loss.algorithm must be one of ['mappo', 'ippo'], got 'ppo'
"""

from __future__ import annotations

__all__ = ["ConfigError", "choice", "at_least", "positive", "unit_interval", "device_option", "check_installed"]

# what an option asks of the machine: the package it imports, and the extra of marl-ppo that installs it
PACKAGES = {
    "log.loggers: tensorboard": ("tensorboard", "loggers"),
    "log.loggers: wandb": ("wandb", "loggers"),
    "log.loggers: mlflow": ("mlflow", "loggers"),
    "train.collector.backend: ray": ("ray", "cluster"),
    "--launcher ray": ("ray", "cluster"),
    "--launcher slurm": ("submitit", "cluster"),
    "env.kind: mamujoco": ("gymnasium_robotics", "mamujoco"),
    "env.kind: lbf": ("lbforaging", "lbf"),
    "env.kind: rware": ("rware", "rware"),
    "env.kind: overcooked": ("overcooked", "overcooked"),
    "env.kind: openspiel": ("pyspiel", "openspiel"),
}


class ConfigError(ValueError):
    """A configuration that cannot run: an unknown key, a bad value, a bad type."""


def choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {list(allowed)}, got {value!r}")


def at_least(name: str, value: float, low: float, what: str = "") -> None:
    if not value >= low:  # also refuses NaN
        raise ConfigError(f"{name} must be >= {low:g}{what}, got {value!r}")


def positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name} must be > 0, got {value!r}")


def unit_interval(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be in [0, 1], got {value!r}")


def device_option(name: str, value: str) -> None:
    """A device string torch can parse, present on this machine (imports torch only for another device than
    the CPU, so that a config is checked without loading it)."""
    if value == "cpu":
        return
    import torch

    try:
        device = torch.device(value)
    except (RuntimeError, TypeError) as err:
        raise ConfigError(f"{name} must be a device such as 'cpu' or 'cuda', got {value!r} ({err})") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"{name}={value!r}, but this machine has no CUDA device; use {name}=cpu")
        if device.index is not None and device.index >= count:
            raise ConfigError(
                f"{name}={value!r}, but this machine has {count} CUDA device(s): cuda:0..cuda:{count - 1}"
            )
    elif device.type not in ("cpu", "meta"):
        available = getattr(torch.backends, device.type, None)
        if available is None or not available.is_available():
            raise ConfigError(f"{name}={value!r}: no {device.type} device on this machine; use {name}=cpu")


def installed(package: str) -> bool:
    """Whether ``package`` can be imported here (found, not imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module blocked in sys.modules
        return False


def check_installed(asked: list[str]) -> None:
    """Raises :class:`ConfigError` for the first of ``asked`` (keys of :data:`PACKAGES`) whose package is
    missing, naming the extra that installs it; options that need no package are passed over."""
    for option in asked:
        package, extra = PACKAGES.get(option, (None, None))
        if package is not None and not installed(package):
            raise ConfigError(
                f"{option} needs the {package!r} package, which is not installed here: pip install 'marl-ppo[{extra}]'"
            )
