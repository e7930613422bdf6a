"""``python -m marl_ppo.suite``: the suite's command line (:func:`marl_ppo.suite.cli.main`)."""

import sys

from marl_ppo.suite.cli import main

if __name__ == "__main__":
    sys.exit(main())
