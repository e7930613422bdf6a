"""Policies and critics, built from a group's specs and the config.

One file per part: :mod:`~marl_ppo.models.distributions` (action spec -> heads and their
distributions), :mod:`~marl_ppo.models.mlp` (agent MLPs), :mod:`~marl_ppo.models.actor`
(policies), :mod:`~marl_ppo.models.critic` (value networks, value normalisation),
:mod:`~marl_ppo.models.builder` (all of them from the config). The router sees actors and critics only.
"""

from marl_ppo.lazy import lazy_exports

# public name -> module that defines it (imported on first use: the options load no torch)
_EXPORTS = {
    "build_models": "marl_ppo.models.builder",
    "build_actor": "marl_ppo.models.actor",
    "seat_actor": "marl_ppo.models.actor",
    "build_critic": "marl_ppo.models.critic",
    "build_global_critic": "marl_ppo.models.critic",
    "value_norms": "marl_ppo.models.critic",
    "Head": "marl_ppo.models.distributions",
    "action_heads": "marl_ppo.models.distributions",
    "StableTanhNormal": "marl_ppo.models.distributions",
    "MultiCategorical": "marl_ppo.models.distributions",
    "SharedAgentMLP": "marl_ppo.models.mlp",
    "agent_mlp": "marl_ppo.models.mlp",
    "TensorOutModule": "marl_ppo.models.modules",
    "Networks": "marl_ppo.models.modules",
    "ModelConfig": "marl_ppo.models.options",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
