"""Checkpoints (`RUN/checkpoint.npz`: weights, Adam slots, RNG state, step, wall time) and
the run folder: its preparation and lock, the check of a resumed run's configuration and
the trimming of its history to the checkpoint being resumed."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from pathlib import Path

import numpy as np

from regal.files import Lock, write_bytes, write_json
from regal.train.actors import BaselineCache
from regal.train.config import CHECKPOINT_FILE, CONFIG_FILE, RESUMABLE_FIELDS, TrainConfig
from regal.train.learner import Learner


def save_checkpoint(run: Path, policy, learner: Learner, rng: np.random.Generator,
                    step: int, wall_time: float, cache: BaselineCache) -> None:
    """Weights, Adam slots, RNG state and step in one file, replaced atomically."""
    meta = {"step": step, "wall_time": wall_time, "rng": rng.bit_generator.state,
            "policy_config": policy.config}
    arrays = {f"w{i:04d}": w for i, w in enumerate(policy.net.get_weights())}
    arrays.update({f"o{i:04d}": v for i, v in enumerate(learner.state())})
    arrays["meta"] = np.array(json.dumps(meta))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    cache.save()  # first: a checkpoint never points at baselines that are not on disk
    write_bytes(run / CHECKPOINT_FILE, buf.getvalue())


def _read_checkpoint(run: Path):
    with np.load(run / CHECKPOINT_FILE) as data:
        meta = json.loads(str(data["meta"]))
        weights = [data[k] for k in sorted(data.files) if k.startswith("w")]
        opt = [data[k] for k in sorted(data.files) if k.startswith("o")]
    return meta, weights, opt


def load_checkpoint_policy(run):
    """The policy stored in a run folder's checkpoint (e.g. to export it)."""
    from regal.policy import Policy

    meta, weights, _ = _read_checkpoint(Path(run))
    policy = Policy(**meta["policy_config"])
    policy.net.set_weights(weights)
    return policy


def _prepare_run(config: TrainConfig, resume: bool) -> tuple[Path, TrainConfig, Lock]:
    """The run folder, locked (`regal.files.Lock`: two runs in one folder would each keep
    half the history, one's configuration and the other's checkpoint), checked and holding
    the configuration; the lock, taken before any work, is the caller's to release."""
    run = Path(config.out)
    if run.exists() and not run.is_dir():
        raise ValueError(f"out: {run} is a file, expected a run folder")
    stored = run / CONFIG_FILE
    if resume and not (run / CHECKPOINT_FILE).exists():
        raise ValueError(f"out: {run} has no {CHECKPOINT_FILE} to resume from")
    run.mkdir(parents=True, exist_ok=True)
    lock = Lock(run, busy=_in_use(run))
    try:
        _check_run(run, config, resume)
        write_json(stored, dataclasses.asdict(config), indent=2)
    except BaseException:
        lock.release()
        raise
    return run, config, lock


def _in_use(run: Path) -> str:
    return f"out: another training run is using {run} (one run per folder)"


def _check_run(run: Path, config: TrainConfig, resume: bool) -> None:
    """A resumed run must keep its stored configuration; a new one needs a folder without
    a checkpoint."""
    if resume:
        old = json.loads((run / CONFIG_FILE).read_text())
        mine = dataclasses.asdict(config)
        # a setting newer than the stored run ran with its default, and must keep it
        defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)
                    if f.default is not dataclasses.MISSING}
        for name in set(mine) - set(old):
            if name in defaults and name not in RESUMABLE_FIELDS and name != "out":
                old[name] = json.loads(json.dumps(defaults[name]))
        for name, value in old.items():
            if name in RESUMABLE_FIELDS or name == "out":
                continue
            if name in mine and json.loads(json.dumps(mine[name])) != value:
                raise ValueError(f"resume: {name} differs from the stored run "
                                 f"({mine[name]!r} vs {value!r}); start a new run folder")
    elif (run / CHECKPOINT_FILE).exists():
        raise ValueError(f"out: {run} already holds a checkpoint; pass --resume to continue "
                         "it or choose another folder")


def _history_step(line: bytes) -> int | None:
    """The step of one history line, or None when the line is not a step record (torn by a
    crash, hand-edited, `42`, invalid UTF-8, nested too deeply)."""
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 1 else None


def _trim_history(path: Path, last_step: int) -> None:
    """Drops history lines written after the checkpoint being resumed, and lines that are
    not step records; every valid step up to the checkpoint is kept, wherever a garbage line
    sits (a garbage line must not cost the steps after it)."""
    if not path.exists():
        return
    keep, skipped = [], 0
    for line in path.read_bytes().splitlines():
        step = _history_step(line)
        if step is None:
            skipped += bool(line.strip())
        elif step <= last_step:
            keep.append(line)
    if skipped:
        print(f"regal: {path}: skipped {skipped} line(s) that are not step records",
              file=sys.stderr)
    write_bytes(path, b"".join(k + b"\n" for k in keep))
