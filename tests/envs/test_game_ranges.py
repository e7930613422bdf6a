"""Bad game parameters never kill the process: Hanabi's are checked against the ranges its library declares
before OpenSpiel sees them, and a game that crashes the library anyway is found in a child process first.

Every Hanabi parameter with a declared range gets out-of-range, zero, negative and wrong-type values through
the config (one ConfigError naming the parameter and its range); the values that abort or segfault OpenSpiel
go through ``marl-ppo train --dry-run`` and a one-batch ``train`` in a subprocess: exit 1, one line, no
traceback, no signal, no run directory.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from marl_ppo.config import ConfigError, load_config
from marl_ppo.envs.game_ranges import HANABI_RANGES

pytest.importorskip("pyspiel")

CASES = [
    (name, value)
    for name, (low, high) in HANABI_RANGES.items()
    for value in sorted({low - 1, 0, -3, "two", 2.5, *([high + 1] if high is not None else [])}, key=str)
    if not (isinstance(value, int) and low <= value and (high is None or value <= high))
]


@pytest.mark.parametrize("name, value", CASES)
def test_every_out_of_range_hanabi_parameter_is_one_config_error_naming_it(name, value):
    with pytest.raises(ConfigError) as err:
        load_config("hanabi_small", [f"env.kwargs.{name}={value}"])
    message = str(err.value)
    assert message.startswith(f"env.kwargs.{name}={value!r}" if isinstance(value, str) else f"env.kwargs.{name}=")
    assert "OpenSpiel's Hanabi takes" in message and "\n" not in message


def test_the_sweep_tried_each_parameter_four_ways_at_least():
    print(f"{len(CASES)} bad Hanabi parameter values tried")
    assert len(CASES) >= 4 * len(HANABI_RANGES)


@pytest.mark.parametrize("bad", ["players=6", "colors=7", "hand_size=0"])
@pytest.mark.parametrize("how", [["--dry-run"], ["train.total_frames=8"]])
def test_values_that_crash_openspiel_exit_1_in_one_line_and_leave_no_run(bad, how, tmp_path):
    cmd = [sys.executable, "-m", "marl_ppo.cli", "train", "hanabi_small", f"env.kwargs.{bad}", f"log.root={tmp_path}"]
    proc = subprocess.run([*cmd, *how], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"env.kwargs.{bad.split('=')[0]}=" in lines[0] and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())


def test_a_game_that_crashes_the_library_is_found_in_a_child_process():
    from marl_ppo.envs.openspiel import load_game

    with pytest.raises(ConfigError, match=r"crashed the process \(SIGABRT\): Input requirements failed \(hanabi_game"):
        load_game("hanabi", {"players": 6})  # past the config's check: the probe finds it
    with pytest.raises(ConfigError, match=r"crashed the process \(SIGSEGV\)"):
        load_game("hanabi", {"hand_size": 0})
    assert load_game("hanabi", {"players": 2, "hand_size": 2}).num_players() == 2
