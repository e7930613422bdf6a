"""Run a benchmark suite (tasks x seeds) and write marl-eval JSON results and an aggregate plot.

::

    python examples/benchmarks/suite.py configs/suites/vmas_small.yaml
    python examples/benchmarks/suite.py configs/suites/tiny.yaml --workers 2 --out /tmp/tiny \\
        --override train.total_frames=1200

Same as ``python -m marl_ppo.suite``; see :mod:`marl_ppo.suite` for the suite file and the outputs.
"""

import sys

from marl_ppo.suite import main

if __name__ == "__main__":  # worker processes must not re-run the suite
    sys.exit(main(prog="examples/benchmarks/suite.py"))
