"""Recipes by name (``recipe=epymarl``): a named overlay just below the layer that names it.

Named on the command line it goes over the config file and under the other overrides; named in a file, the
file's own values win; a resolved ``config.yaml`` reads back to the same config; ``--print-config`` says
which values it set and which a later layer changed; an unknown name is refused with the closest; a suite
sweeps it as a key. ``docs/recipes.md`` lists every value of every recipe.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from marl_ppo.cli import main
from marl_ppo.config import ConfigError, from_yaml, load_config, to_yaml
from marl_ppo.recipes import RECIPES, TEAM_SUM

DOCS = Path(__file__).resolve().parents[2] / "docs" / "recipes.md"


def test_on_the_command_line_a_recipe_goes_over_the_file_and_under_the_other_overrides():
    shipped = load_config("lbf_8x8_2p_2f_coop")
    assert shipped.loss.entropy_coeff == 0.01 and shipped.loss.estimator == "gae"
    cfg = load_config("lbf_8x8_2p_2f_coop", ["recipe=epymarl", "train.lr=1e-4", "train.frames_per_batch=1000"])
    assert (cfg.loss.entropy_coeff, cfg.loss.estimator, cfg.loss.nstep) == (0.001, "nstep", 5)
    assert cfg.model.agent_id and not cfg.loss.normalize_advantage and cfg.env.time_limit == "terminate"
    assert cfg.reward_table == TEAM_SUM
    assert cfg.train.lr == 1e-4  # the override after it wins
    assert cfg.train.minibatch_size == 1000  # the whole batch, whatever the batch ends up being
    rware = load_config("rware_tiny_2ag", ["recipe=epymarl"])
    assert (rware.train.lr, rware.loss.nstep, rware.train.frames_per_batch) == (5e-4, 10, 5000)  # its family's


def test_named_in_a_file_the_files_own_values_win_and_a_resolved_config_reads_back_the_same(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("recipe: epymarl\nenv: {kind: lbf, scenario: 8x8-2p-2f-coop}\nloss: {entropy_coeff: 0.02}\n")
    cfg = load_config(path)
    assert cfg.loss.entropy_coeff == 0.02 and cfg.loss.estimator == "nstep" and cfg.train.lr == 3e-4
    text = to_yaml(load_config("lbf_8x8_2p_2f_coop", ["recipe=mappo", "loss.entropy_coeff=0.05"]))
    (tmp_path / "config.yaml").write_text(text)
    again = load_config(tmp_path / "config.yaml")
    assert to_yaml(again) == text and from_yaml(text) == again
    assert again.loss.entropy_coeff == 0.05 and again.loss.value_norm == "running"


def test_print_config_says_what_the_recipe_set_and_what_was_set_over_it(capsys):
    assert main(["train", "lbf_8x8_2p_2f_coop", "recipe=epymarl", "train.lr=1e-4", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# recipe=epymarl: Papoudakis")
    assert "#   loss.entropy_coeff: 0.001\n" in out
    assert "#   train.lr: 0.0003  (set over the recipe: 0.0001)\n" in out
    assert "#   leaves out: the critic's targets from a soft-updated target critic" in out
    assert yaml.safe_load(out)["recipe"] == "epymarl"


def test_an_unknown_recipe_is_refused_with_the_closest_name():
    with pytest.raises(ConfigError, match=r"recipe=epymral: unknown recipe 'epymral' \(did you mean 'epymarl'\?\)"):
        load_config("lbf_8x8_2p_2f_coop", ["recipe=epymral"])


def test_a_suite_sweeps_recipes_as_a_key(tmp_path):
    from marl_ppo.suite.spec import Suite, plan

    suite = tmp_path / "recipes.yaml"
    suite.write_text(
        "name: recipes\ntasks: [lbf_8x8_2p_2f_coop]\nseeds: [0]\nsweep: {recipe: [epymarl, mappo]}\n"
        f"out: {tmp_path / 'out'}\n"
    )
    jobs = plan(Suite.load(suite))
    got = sorted((job.variant, from_yaml(job.config_yaml).loss.estimator) for job in jobs)
    assert [estimator for _, estimator in got] == ["nstep", "gae"] and all("recipe=" in v for v, _ in got)


def test_the_docs_page_lists_every_value_of_every_recipe():
    page = DOCS.read_text()
    for row in RECIPES:
        assert f"`recipe={row.name}`" in page
        section = page.split(f"`recipe={row.name}`", 1)[1].split("\n### ", 1)[0]
        for kind in ["", *row.families]:
            for key, value in (row.families[kind] if kind else row.values).items():
                assert re.search(rf"`{re.escape(key)}`[^\n]*{re.escape(_shown(key, value))}", section), (row.name, key)


def _shown(key: str, value) -> str:
    """A recipe value as the docs page writes it."""
    if key == "reward_table":
        return "team sum"
    if isinstance(value, bool):
        return str(value).lower()
    return "the whole batch" if value == "${train.frames_per_batch}" else str(value)
