"""Trained policies out of the framework: ONNX, TorchScript and ``torch.export`` files, each with a
``policy.json`` that says what a runtime needs (``marl-ppo export``; ``docs/deploy.md``).

:mod:`~marl_ppo.export.graph` turns a group's actor into a function of plain tensors,
:mod:`~marl_ppo.export.formats` holds one row per format, :mod:`~marl_ppo.export.policy` writes and
checks the files, :mod:`~marl_ppo.export.manifest` writes ``policy.json``, :mod:`~marl_ppo.export.run`
exports a run's groups and :mod:`~marl_ppo.export.command` is the command line's ``export`` (no torch).
"""

from marl_ppo.lazy import lazy_exports, names_by_module

# module -> the public names it defines (imported on first use: the command line's parser loads no torch)
_EXPORTS = names_by_module(
    {
        "marl_ppo.export.formats": "FORMATS",
        "marl_ppo.export.graph": "ExportError policy_graph",
        "marl_ppo.export.policy": "export_policy",
        "marl_ppo.export.run": "export_run",
    }
)
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
