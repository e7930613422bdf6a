"""Loggers a researcher shares, read back from what they wrote; callbacks; the plots.

One tiny VMAS navigation run logs to CSV, TensorBoard, W&B (offline, the real ``wandb``
package) and MLflow (a file store in the run directory, the real ``mlflow`` package), with an
evaluation video every iteration. Each backend must hold the resolved config as its
hyper-parameters, the scalars, the evaluation video and the final plots, read back from its own
files: W&B's offline run log, MLflow's store, TensorBoard's event file. Callbacks are called in
the documented order with the documented arguments; one that raises stops the run naming it, and
the last checkpoint stays. The diagnostics plot and ``marl-ppo plot --metric`` draw per-head curves.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from marl_ppo.cli import main
from marl_ppo.config import load_config
from marl_ppo.run.callbacks import Callback, CallbackError, Callbacks
from marl_ppo.run.checkpoints import load_checkpoint
from marl_ppo.run.logger import read_scalars
from marl_ppo.run.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
FPB = 40
TINY = [
    "env.num_envs=4",
    "env.max_steps=10",
    "env.kwargs.n_agents=2",
    f"train.frames_per_batch={FPB}",
    f"train.total_frames={2 * FPB}",
    "train.num_epochs=1",
    f"train.minibatch_size={FPB}",
    "train.num_threads=1",
    "model.hidden=[16]",
    "log.eval_every=1",
    "log.eval_episodes=2",
    "log.checkpoint_every=1",
    "log.progress=false",
]


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory) -> Path:
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    run = tmp_path_factory.mktemp("loggers") / "run"
    cfg = load_config(
        overrides=TINY
        + [
            "log.loggers=[csv,tensorboard,wandb,mlflow]",
            "log.wandb.mode=offline",
            "log.wandb.group=tests",
            "log.wandb.tags=[tiny,ci]",
            "log.video=true",
            "train.lr=0.00123",
        ]
    )
    Trainer(cfg, run_dir=run).fit()
    return run


# -- W&B -------------------------------------------------------------------------------------------


def _wandb_records(run: Path):
    """The records of W&B's offline run log (``run-*.wandb``: LevelDB's log format of protobufs)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, chunks = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        if kind == 0 and length == 0:
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        chunks = chunk if kind in (1, 2) else chunks + chunk  # full/first, or middle/last
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(chunks)
            yield record


@pytest.mark.slow
def test_wandb_offline_run_holds_config_scalars_video_and_plots(shared_run):
    config, history, summary, run_info = {}, {}, {}, None
    for r in _wandb_records(shared_run):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            run_info = r.run
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in r.config.update})
        elif kind == "history":
            for item in r.history.item:
                history.setdefault(item.key or "/".join(item.nested_key), []).append(item.value_json)
        elif kind == "summary":
            summary.update({item.key or "/".join(item.nested_key): item.value_json for item in r.summary.update})
    assert run_info.run_group == "tests" and list(run_info.tags) == ["tiny", "ci"] and run_info.project == "marl_ppo"
    assert config["train"]["lr"] == pytest.approx(0.00123) and config["env"]["scenario"] == "navigation"
    assert len(history["train/agents/loss_objective"]) == 2
    assert [float(v) for v in history["train/agents/loss_objective"]] == pytest.approx(
        [v for _, v in read_scalars(shared_run)["train/agents/loss_objective"]], rel=1e-6
    )
    assert json.loads(summary["frames"]) == 2 * FPB and "eval/agents/episode_reward" in summary
    media = shared_run.glob("wandb/offline-run-*/files/media")
    files = [p.relative_to(m) for m in media for p in m.rglob("*") if p.is_file()]
    assert any(str(p).startswith("videos/eval/video") and p.suffix == ".gif" for p in files), files
    assert any(str(p).startswith("images/plots/returns") and p.suffix == ".png" for p in files), files
    assert any(str(p).startswith("images/plots/diagnostics") for p in files), files


# -- MLflow ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_mlflow_store_holds_params_metrics_and_artifacts(shared_run, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient((shared_run / "mlflow").resolve().as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == "marl_ppo"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.tags["mlflow.runName"] == "navigation-mappo-seed0"
    assert float(run.data.params["train.lr"]) == pytest.approx(0.00123)
    assert run.data.params["model.hidden"] == "[16]"
    losses = [m.value for m in client.get_metric_history(run.info.run_id, "train/agents/loss_objective")]
    assert losses == pytest.approx([v for _, v in read_scalars(shared_run)["train/agents/loss_objective"]], rel=1e-6)
    assert run.data.metrics["summary/frames"] == 2 * FPB
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert {"plots/returns.png", "plots/diagnostics.png"} <= artifacts
    videos = [a.path for a in client.list_artifacts(run.info.run_id, "eval")]
    assert videos and all(v.endswith(".gif") for v in videos)


@pytest.mark.slow
def test_mlflow_cli_lists_the_store_without_a_malformed_experiment(shared_run):
    """``mlflow experiments search`` / ``runs list`` read the store as MLflow laid it out (issue 22)."""
    env = {**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true"}
    env["MLFLOW_TRACKING_URI"] = (shared_run / "mlflow").resolve().as_uri()
    mlflow_cli = [sys.executable, "-m", "mlflow"]
    search = subprocess.run([*mlflow_cli, "experiments", "search"], env=env, capture_output=True, text=True)
    assert search.returncode == 0, search.stderr
    assert "Malformed" not in search.stderr and "Traceback" not in search.stderr, search.stderr
    (line,) = [ln for ln in search.stdout.splitlines() if " marl_ppo " in ln]
    experiment_id = line.split()[0]
    runs = subprocess.run(
        [*mlflow_cli, "runs", "list", "--experiment-id", experiment_id], env=env, capture_output=True, text=True
    )
    assert runs.returncode == 0 and "navigation-mappo-seed0" in runs.stdout, runs.stderr
    # nothing at the store's root but its experiments (a folder with meta.yaml) and MLflow's trash
    assert all((p / "meta.yaml").exists() or p.name == ".trash" for p in (shared_run / "mlflow").iterdir())


# -- TensorBoard -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_tensorboard_event_file_holds_hparams_images_and_the_video(shared_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    (events,) = shared_run.glob("tensorboard/**/events.out.tfevents.*")
    acc = EventAccumulator(str(events.parent), size_guidance={"images": 0})
    acc.Reload()
    tags = acc.Tags()
    assert {"plots/returns", "plots/diagnostics", "eval/video"} <= set(tags["images"])
    assert acc.Images("eval/video")[0].encoded_image_string[:6] == b"GIF89a"  # shown animated
    content = acc.PluginTagToContent("hparams")
    infos = [plugin_data_pb2.HParamsPluginData.FromString(v) for v in content.values()]
    hparams = {
        k: v
        for info in infos
        if info.HasField("session_start_info")
        for k, v in info.session_start_info.hparams.items()
    }
    assert hparams["train.lr"].number_value == pytest.approx(0.00123)
    assert hparams["env.scenario"].string_value == "navigation"


# -- callbacks -------------------------------------------------------------------------------------


class Recorder(Callback):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_batch_collected(self, trainer, batch):
        self.calls.append(
            (
                "batch",
                trainer.iteration,
                tuple(batch.batch_size),
                ("next", "agents", "train_reward") in batch.keys(True),
            )
        )

    def on_evaluation_end(self, trainer, returns):
        self.calls.append(("eval", trainer.iteration, sorted(returns)))

    def on_update_end(self, trainer, stats):
        self.calls.append(("update", trainer.iteration, stats["time/iteration"], "train/loss" in stats))

    def on_checkpoint(self, trainer, path):
        self.calls.append(("checkpoint", trainer.iteration, Path(path).name))

    def on_run_end(self, trainer, summary):
        self.calls.append(("end", trainer.iteration, summary["frames"]))


def test_callbacks_are_called_in_order_with_their_arguments(tmp_path):
    rec = Recorder()
    Trainer(load_config(overrides=TINY + ["log.plot=false"]), run_dir=tmp_path / "run", callbacks=[rec]).fit()
    assert rec.calls == [
        ("batch", 0, (1, 4, 10), True),  # [S, E, T]: the seed axis, S = 1
        ("eval", 1, ["agents"]),
        ("update", 1, 1.0, True),
        ("checkpoint", 1, "iter_00001.pt"),
        ("batch", 1, (1, 4, 10), True),
        ("eval", 2, ["agents"]),
        ("update", 2, 2.0, True),
        ("checkpoint", 2, "iter_00002.pt"),
        ("end", 2, 2 * FPB),
    ]


def test_a_failing_callback_stops_the_run_naming_it_and_keeps_the_checkpoint(tmp_path):
    class Exploding(Callback):
        def on_update_end(self, trainer, stats):
            if trainer.iteration == 2:
                raise ValueError("boom")

    run = tmp_path / "run"
    cfg = load_config(overrides=TINY + ["log.plot=false", f"train.total_frames={4 * FPB}"])
    with pytest.raises(CallbackError, match=r"callback 'Exploding' failed in on_update_end: ValueError: boom"):
        Trainer(cfg, run_dir=run, callbacks=[Exploding()]).fit()
    assert load_checkpoint(run / "checkpoints" / "last.pt")["iteration"] == 1
    assert "callback 'Exploding' failed" in (run / "error.txt").read_text()


def test_a_callback_can_end_the_run_early(tmp_path):
    class StopAtTwo(Callback):
        def on_update_end(self, trainer, stats):
            if trainer.iteration == 2:
                trainer.stop()

    run = tmp_path / "run"
    cfg = load_config(overrides=TINY + ["log.plot=false", f"train.total_frames={6 * FPB}"])
    summary = Trainer(cfg, run_dir=run, callbacks=[StopAtTwo()]).fit()
    assert (summary["iteration"], summary["frames"]) == (2, 2 * FPB)
    assert load_checkpoint(run / "checkpoints" / "last.pt")["iteration"] == 2
    assert not (run / "error.txt").exists()


def test_an_object_with_no_hook_is_refused():
    with pytest.raises(TypeError, match="has none of the hooks"):
        Trainer(load_config(overrides=TINY), callbacks=[object()])


def test_a_hook_counts_as_implemented_only_where_a_callback_defines_it():
    class Reads(Callback):
        def on_batch_collected(self, trainer, batch):
            pass

    class Plain:
        def on_update_end(self, trainer, stats):
            pass

    assert not Callbacks([Callback(), Plain()]).has("on_batch_collected")  # the base class's no-op
    assert Callbacks([Plain(), Reads()]).has("on_batch_collected")
    assert Callbacks([Plain()]).has("on_update_end") and not Callbacks().has("on_update_end")


# -- plots -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_diagnostics_and_chosen_metrics_per_head(tmp_path, capsys):
    run = tmp_path / "run"
    tiny = [o for o in TINY if "n_agents" not in o]  # simple_reference: composite {move, comm} actions
    assert (
        main(
            [
                "train",
                str(ROOT / "configs" / "simple_reference.yaml"),
                *tiny,
                "log.eval_every=0",
                f"log.root={tmp_path}",
                "log.name=run",
            ]
        )
        == 0
    )
    assert (run / "plots" / "diagnostics.png").is_file()
    capsys.readouterr()
    assert main(["plot", str(run), "--metric", "train/*/comm/entropy", "--metric", "train/loss"]) == 0
    assert str(run / "plots" / "metrics.png") in capsys.readouterr().out
    assert main(["plot", str(run), "--metric", "train/nope"]) == 1
    err = capsys.readouterr().err
    assert "no logged metric matches ['train/nope']" in err and "train/agents/comm/entropy" in err
