"""Training configuration: `TrainConfig` (checked on construction), the run folder's file
names, the settings a resume may change (`RESUMABLE_FIELDS`) and `stored_config`, the
configuration a run folder was started with."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from regal.policy.menus import PRIOR_LOGIT
from regal.regal_method import UNIFORM_MUTANT_FRACTION

CHECKPOINT_FILE = "checkpoint.npz"
BASELINES_FILE = "baselines.json"
HISTORY_FILE = "history.jsonl"
CONFIG_FILE = "train_config.json"
# may change between a run and its resume; everything else must match
RESUMABLE_FIELDS = ("steps", "max_minutes", "workers", "ray", "progress", "checkpoint_minutes")


@dataclass
class TrainConfig:
    train: str                       # graph folder or recipe ("train", "train:500")
    val: str                         # graph folder or recipe ("valid:32")
    out: str                         # run folder
    steps: int = 200
    budget: int = 1000               # BRKGA evaluations per rollout
    devices: tuple = (2, 4)          # each sampled graph gets one of these counts
    objective: str = "peak_memory"
    graphs_per_step: int = 4
    samples: int = 4                 # K sampled actions per graph
    seeds_per_action: int = 1        # S BRKGA seeds 0..S-1 per action (common to all K)
    population_size: int = 100
    learning_rate: float = 1e-3
    entropy_coef: float = 1e-3
    clip_norm: float = 1.0
    val_graphs: int = 16
    val_seeds: int = 2
    val_every: int = 10              # steps; 0 = never
    checkpoint_minutes: float = 3.0
    max_minutes: float | None = None  # stop (checkpoint + export) after this much wall time
    workers: int = 2
    ray: bool = False
    seed: int = 0
    hidden: int = 64
    num_layers: int = 4
    learn: str = "both"
    learn_elite_bias: bool = True
    prior_logit: float = PRIOR_LOGIT  # the untrained policy's preference (menus.PRIOR)
    seed_population: bool = True     # reference candidates in BRKGA's first population
    uniform_mutant_fraction: float = UNIFORM_MUTANT_FRACTION
    pretrain_from: str | None = None  # best-known store (JSON lines) for supervised steps
    pretrain_steps: int = 0          # the first this many steps are supervised
    augment: float = 0.0             # REINFORCE graphs' costs/sizes jittered (log-normal scale)
    # share of each rollout's budget left to local search from BRKGA's best, as in the `regal`
    # method (without the fresh climbs it races, which ignore the policy); 0: BRKGA alone
    polish_share: float = 0.0
    # the rollouts run the `regal` method's whole schedule (`DEFAULT_SCHEDULE`: BRKGA's tenth,
    # then the climb from its best raced against the fresh climbs), so the reward is the
    # pipeline's final value: an action pays only where its basin beats the fresh climbs'
    race: bool = False
    init_from: str | None = None     # policy folder whose weights start a new run (fine-tuning)
    progress: bool = True

    def __post_init__(self) -> None:
        self.devices = tuple(int(d) for d in np.atleast_1d(self.devices))
        for name in ("steps", "budget", "graphs_per_step", "samples", "workers", "val_graphs",
                     "val_seeds", "seeds_per_action"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        if self.budget < self.population_size:
            raise ValueError(f"budget: must be >= population_size ({self.population_size}), "
                             f"got {self.budget}")
        if not self.devices or min(self.devices) < 1:
            raise ValueError(f"devices: expected device counts >= 1, got {self.devices}")
        if self.objective not in ("peak_memory", "makespan"):
            raise ValueError(f"objective: expected peak_memory or makespan, got {self.objective!r}")
        if self.val_every < 0:
            raise ValueError(f"val_every: expected >= 0, got {self.val_every}")
        if isinstance(self.pretrain_steps, bool) or int(self.pretrain_steps) != self.pretrain_steps \
                or self.pretrain_steps < 0:
            raise ValueError(f"pretrain_steps: expected an integer >= 0, got {self.pretrain_steps!r}")
        if self.pretrain_steps and not self.pretrain_from:
            raise ValueError("pretrain_steps: needs pretrain_from (a best-known store)")
        # a NaN learning rate trained a policy of NaN weights and exited 0 (issue 24 item 5)
        for name, bound in (("learning_rate", "> 0"), ("entropy_coef", ">= 0"),
                            ("clip_norm", "> 0"), ("checkpoint_minutes", "> 0"),
                            ("max_minutes", "> 0"), ("prior_logit", ""), ("augment", ">= 0")):
            value = getattr(self, name)
            if value is None and name == "max_minutes":
                continue
            number = not isinstance(value, bool) and isinstance(value, (int, float, np.number))
            if not (number and math.isfinite(value)
                    and (bound != "> 0" or value > 0) and (bound != ">= 0" or value >= 0)):
                raise ValueError(f"{name}: expected a finite number {bound}".rstrip()
                                 + f", got {value!r}")
        for name in ("population_size", "hidden", "num_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        from regal.search.schedule import check_share
        check_share(self.polish_share, "polish_share", "the budget")
        if not isinstance(self.race, bool):
            raise ValueError(f"race: expected true or false, got {self.race!r}")
        if self.race and self.polish_share:
            raise ValueError("polish_share: race runs the regal method's own schedule; "
                             "leave polish_share at 0")
        if not 0.0 <= float(self.uniform_mutant_fraction) <= 1.0:
            raise ValueError(f"uniform_mutant_fraction: expected a share in [0, 1], got "
                             f"{self.uniform_mutant_fraction!r}")

    def policy_kwargs(self) -> dict:
        return dict(num_layers=self.num_layers, hidden=self.hidden, learn=self.learn,
                    learn_elite_bias=self.learn_elite_bias, seed=self.seed,
                    prior_logit=self.prior_logit)

    def search_kwargs(self) -> dict:
        return dict(seed_population=self.seed_population,
                    uniform_mutant_fraction=self.uniform_mutant_fraction)

    def rollout_params(self, action) -> dict:
        """A sampled action's rollout parameters (`RolloutTask.params`)."""
        from regal.regal_method import search_params

        return dict(search_params(action, **self.search_kwargs()),
                    polish_share=self.polish_share, race=self.race)


def stored_config(out) -> dict:
    """The configuration run folder `out` was started with (its train_config.json) as
    TrainConfig keyword arguments, `out` set to the folder given: a resume needs no flag
    repeated. ValueError naming the folder or file when there is no checkpoint to resume
    or the stored configuration is unreadable or names a field TrainConfig lacks."""
    run = Path(out)
    if not (run / CHECKPOINT_FILE).exists():
        raise ValueError(f"resume: {run} has no {CHECKPOINT_FILE} to resume from")
    path = run / CONFIG_FILE
    try:
        stored = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"resume: cannot read {path}: {exc}") from None
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    if not isinstance(stored, dict):
        raise ValueError(f"resume: {path}: expected a JSON object of settings")
    unknown = sorted(set(stored) - known)
    if unknown:
        raise ValueError(f"resume: {path}: unknown setting {unknown[0]!r}")
    return {**stored, "out": str(out)}
