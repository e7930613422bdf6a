"""``python -m marl_ppo ...``: the ``marl-ppo`` command line."""

import sys

from marl_ppo.cli import main

if __name__ == "__main__":
    sys.exit(main())
