"""Trained policies out of the framework: ONNX, TorchScript and ``torch.export`` files, each with a
``policy.json`` that says what a runtime needs (``marl-ppo export``; ``docs/deploy.md``).

:mod:`~marl_ppo.export.graph` turns a group's actor into a function of plain tensors,
:mod:`~marl_ppo.export.formats` holds one row per format, :mod:`~marl_ppo.export.policy` writes and
checks the files, :mod:`~marl_ppo.export.manifest` writes ``policy.json``, and
:mod:`~marl_ppo.export.run` exports a run's groups.
"""

from marl_ppo.export.formats import FORMATS
from marl_ppo.export.graph import ExportError, policy_graph
from marl_ppo.export.policy import export_policy
from marl_ppo.export.run import export_run

__all__ = ["FORMATS", "ExportError", "policy_graph", "export_policy", "export_run"]
