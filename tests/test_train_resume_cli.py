"""`regal train --resume RUN` (issue 23 item 3): a run continues from its stored
configuration with no flag repeated, exactly as an uninterrupted run; only --steps,
--max-minutes, --workers, --ray, --checkpoint-minutes and --quiet may change; any other flag
that differs is refused naming it. Tiny networks, graphs and budgets keep this file fast."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow loads: Keras 2 (tf-keras)

import numpy as np
import pytest

from regal.cli import main

pytest.importorskip("tensorflow")
pytest.importorskip("tf_keras")
from regal import train as train_module  # noqa: E402
from regal.train import TrainConfig, train  # noqa: E402


def tiny_config(out, steps) -> TrainConfig:
    """Settings the command line cannot even give (hidden, layers, population): a resume
    must take them from the run folder."""
    return TrainConfig(train="train:20", val="valid:2", out=str(out), steps=steps, budget=40,
                       devices=(2, 3), graphs_per_step=2, samples=2, population_size=10,
                       val_every=2, val_graphs=2, val_seeds=1, workers=1, hidden=8,
                       num_layers=1, learning_rate=0.01, progress=False)


def _history(run) -> list[dict]:
    return [json.loads(line) for line in (Path(run) / "history.jsonl").read_text().splitlines()]


def _stored(run) -> dict:
    return json.loads((Path(run) / "train_config.json").read_text())


def _run(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """`straight`: 3 steps in one go; `resumed`: 1 step, then `regal train --resume RUN
    --steps 3` with nothing else."""
    root = tmp_path_factory.mktemp("runs")
    train(tiny_config(root / "straight", 3))
    train(tiny_config(root / "resumed", 1))
    assert main(["train", "--resume", str(root / "resumed"), "--steps", "3", "--quiet"]) == 0
    return root


def test_resume_without_flags_continues_exactly(runs):
    a, b = _history(runs / "straight"), _history(runs / "resumed")
    assert [r["step"] for r in b] == [1, 2, 3]
    for key in ("rewards", "graphs", "devices", "val_improvement", "loss"):
        assert [r.get(key) for r in a] == [r.get(key) for r in b], key
    with np.load(runs / "straight" / "checkpoint.npz") as ca, \
            np.load(runs / "resumed" / "checkpoint.npz") as cb:
        assert sorted(ca.files) == sorted(cb.files)
        for key in ca.files:
            if key != "meta":
                np.testing.assert_array_equal(ca[key], cb[key], err_msg=key)
    stored = _stored(runs / "resumed")
    # the stored settings the command line has no flag for survived; --steps changed
    assert (stored["hidden"], stored["num_layers"], stored["population_size"]) == (8, 1, 10)
    assert stored["steps"] == 3 and stored["progress"] is False


def test_resume_out_form_changes_only_the_resumable_flags(runs, capsys):
    run = str(runs / "resumed")
    code, text = _run(["train", "--resume", "--out", run, "--max-minutes", "30",
                       "--workers", "1", "--budget", "40", "--quiet"], capsys)
    assert code == 0, text  # --budget repeats the stored value: allowed
    assert "at step 3" in text  # its 3 steps are done already
    stored = _stored(run)
    assert stored["max_minutes"] == 30.0 and stored["steps"] == 3 and stored["budget"] == 40


@pytest.mark.parametrize("flags, named", [
    (["--budget", "80"], "--budget"),
    (["--devices", "2"], "--devices"),
    (["--train", "train:30"], "--train"),
    (["--learning-rate", "0.5"], "--learning-rate"),
    (["--no-elite-bias"], "--no-elite-bias"),
    (["--seed", "1"], "--seed"),
    (["--polish-share", "0.5"], "--polish-share"),
    (["--race"], "--race"),
])
def test_resume_refuses_flags_that_change_the_run(runs, capsys, flags, named):
    run = runs / "resumed"
    before = (run / "train_config.json").read_bytes(), (run / "checkpoint.npz").read_bytes()
    code, text = _run(["train", "--resume", str(run), *flags, "--quiet"], capsys)
    assert code == 2 and named in text and "Traceback" not in text, text
    assert "--steps" in text  # says what may change
    assert ((run / "train_config.json").read_bytes(),
            (run / "checkpoint.npz").read_bytes()) == before


@pytest.mark.parametrize("argv, named", [
    (["train", "--out", "{tmp}/new"], "--train"),
    (["train", "--train", "train:20", "--out", "{tmp}/new"], "--val"),
    (["train", "--resume"], "--out"),
    (["train", "--resume", "{tmp}/empty"], "checkpoint"),
    (["train", "--resume", "{tmp}/a", "--out", "{tmp}/b"], "--resume"),
])
def test_bad_train_invocations_exit_2_naming_the_problem(tmp_path, capsys, argv, named):
    (tmp_path / "empty").mkdir()
    code, text = _run([a.format(tmp=tmp_path) for a in argv], capsys)
    assert code == 2 and named in text and "Traceback" not in text, text
    assert not (tmp_path / "new").exists()


def test_unreadable_stored_configuration_is_named(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.npz").write_bytes(b"")
    (run / "train_config.json").write_text("{not json")
    code, text = _run(["train", "--resume", str(run)], capsys)
    assert code == 2 and "train_config.json" in text and "Traceback" not in text
    (run / "train_config.json").write_text(json.dumps({"steps": 3, "colour": "red"}))
    code, text = _run(["train", "--resume", str(run)], capsys)
    assert code == 2 and "'colour'" in text


def test_new_run_flags_map_onto_the_config_defaults(tmp_path, monkeypatch, capsys):
    """Flags left out take TrainConfig's defaults (what the parser's defaults were)."""
    seen = []

    def fake_train(config, resume=False):
        seen.append((config, resume))
        return {"stopped": "steps", "step": 0, "wall_time": 0.0, "val_improvement": None,
                "policy": "x"}
    monkeypatch.setattr(train_module, "train", fake_train)
    out = str(tmp_path / "run")
    assert main(["train", "--train", "t", "--val", "v", "--out", out]) == 0
    assert seen[-1] == (TrainConfig(train="t", val="v", out=out), False)
    assert main(["train", "--train", "t", "--val", "v", "--out", out, "--devices", "3",
                 "--no-elite-bias", "--quiet", "--ray", "--max-minutes", "2",
                 "--polish-share", "0.5", "--init-from", "data/policy"]) == 0
    config = seen[-1][0]
    assert config.polish_share == 0.5 and config.init_from == "data/policy"
    assert config.devices == (3,) and config.learn_elite_bias is False
    assert config.progress is False and config.ray is True and config.max_minutes == 2.0
    assert config.steps == 200 and config.budget == 1000 and config.race is False
    assert main(["train", "--train", "t", "--val", "v", "--out", out, "--race"]) == 0
    assert seen[-1][0].race is True


def test_help_documents_resume(capsys):
    code, text = _run(["train", "--help"], capsys)
    assert code == 0 and "--resume RUN" in text and "train_config.json" in text


def test_train_command_prints_no_tensorflow_log_lines(tmp_path):
    """`regal train` loads TensorFlow with its native log lines (absl's pre-initialisation
    notices, the CUDA probe) kept off stderr, as import/apply/measure do (issue 23 item 4)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "REGAL_DEBUG")}
    proc = subprocess.run(
        [sys.executable, "-m", "regal.cli", "train", "--train", "train:3", "--val", "valid:1",
         "--out", str(tmp_path / "run"), "--steps", "1", "--budget", "100", "--samples", "2",
         "--graphs-per-step", "1", "--val-every", "0", "--workers", "1", "--quiet"],
        capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    noisy = [line for line in proc.stderr.splitlines()
             if any(tag in line for tag in ("absl", "cuda", "I0000", "W0000", "E0000"))]
    assert noisy == [], noisy
    assert "stopped (steps) at step 1" in proc.stdout
