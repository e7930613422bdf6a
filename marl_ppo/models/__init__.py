"""Policies and critics, built from a group's specs and the config.

One file per part: :mod:`~marl_ppo.models.distributions` (action spec -> heads and their
distributions), :mod:`~marl_ppo.models.mlp` (agent MLPs), :mod:`~marl_ppo.models.actor`
(policies), :mod:`~marl_ppo.models.critic` (value networks, value normalisation),
:mod:`~marl_ppo.models.builder` (all of them from the config). The router sees actors and critics only.
"""

from marl_ppo.lazy import lazy_exports, names_by_module

# module -> the public names it defines (imported on first use: the options load no torch)
_EXPORTS = names_by_module(
    {
        "marl_ppo.models.builder": "build_models",
        "marl_ppo.models.actor": "build_actor seat_actor",
        "marl_ppo.models.critic": "build_critic build_global_critic value_norms",
        "marl_ppo.models.distributions": "Head action_heads StableTanhNormal MultiCategorical",
        "marl_ppo.models.mlp": "SharedAgentMLP agent_mlp",
        "marl_ppo.models.modules": "TensorOutModule Networks",
        "marl_ppo.models.options": "ModelConfig",
    }
)
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
