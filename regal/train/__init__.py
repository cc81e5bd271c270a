"""Training of REGAL's policy (REINFORCE, optionally after supervised pretraining), split
Acme-style into actors, a learner and a loop, one job per module:

- `regal.train.config`: `TrainConfig`, the run folder's file names, `RESUMABLE_FIELDS`,
  `stored_config`.
- `regal.train.sources`: `GraphSource`, `graph_source` (a folder of graph files or a recipe).
- `regal.train.actors`: `RolloutTask`, `run_rollout`, `make_actors`, `BaselineCache`,
  `rollout_rewards` (numpy only).
- `regal.train.learner`: `Episode`, `advantages`, `Learner` (TensorFlow).
- `regal.train.checkpoints`: `save_checkpoint`, `load_checkpoint_policy`, the run folder's
  preparation, lock and history trimming.
- `regal.train.pretrain`: `BestKnown`, `read_best_known`, `supervised_targets`.
- `regal.train.loop`: `train`, `validation_rewards`.

Every name is re-exported here (`from regal.train import train`).

- **Actors** (numpy only, no TensorFlow): given a graph, devices, a budget, a BRKGA seed and
  the action's search parameters (`regal.regal_method.search_params`: per-gene Betas in
  slot space, the slot -> device gene order, the seeded first population, the uniform
  mutant share), run BRKGA and return the objective (`run_rollout`). They run in a
  spawn-based process pool (default), on Ray, or inline.
- **Learner** (TensorFlow): `Learner.update(episodes)` takes, per graph, the sampled menu
  choices and their rewards and takes one policy-gradient step (`losses.reinforce_loss`);
  `Learner.supervised_update(targets)` one step of `losses.supervised_loss` towards
  best-known solutions. Both Adam, clipped; the learner never knows how data was gathered.
- **Loop** (`train`): the first `pretrain_steps` steps are supervised on a best-known store
  (`pretrain_from`, JSON lines, `read_best_known`); the rest sample graphs and actions, ask
  the actors for rewards, feed the learner, validate, log to TensorBoard and checkpoint.
  Without a store it is REINFORCE from scratch.

Reward of one rollout: `(obj_uniform - obj_policy) / obj_uniform`, both BRKGA runs at the
same budget with the same BRKGA seed (common random numbers). Every one of a graph's `K`
sampled actions runs with the same `seeds_per_action` BRKGA seeds `0..S-1` and its reward is
the mean over them, so the actions of a graph are compared on common random numbers too;
the uniform baseline of (graph, devices, seed, budget, objective) is computed once and
cached in `RUN/baselines.json` (kept across `--resume`). Use the evaluation budget (5,000)
for `budget`: what the policy learns at 1,000 evaluations need not hold at 5,000.

Loss per REINFORCE step (G graphs, K samples each), documented choices:
    A_gk   = (r_gk - mean_k r_gk) / (std of all A in the step + 1e-8)   # per-graph mean baseline
    loss   = -mean_gk(A_gk * logp_gk / n_g) - entropy_coef * mean_g(H_g / n_g)
`logp` and the entropy `H` are sums over ops and learned heads; dividing by the op count
`n_g` makes every graph weigh the same whatever its size and keeps the step size of a
per-op decision independent of n. Scaling advantages by their std keeps the gradient
scale stable although raw rewards are ~1e-2. Supervised step: mean over graphs of the
target's negative log-likelihood per op.

The loop's state (weights, Adam slots, numpy RNG state, step, wall time) goes into one
`RUN/checkpoint.npz`, written atomically every few minutes, at the end and on SIGTERM/SIGINT;
`resume=True` continues from it exactly (same graphs, samples, rewards and weights as an
uninterrupted run). TensorFlow is imported only inside functions of the learner side
(`learner`, `loop`), so worker processes that unpickle `run_rollout` never load it.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before any TensorFlow import (learner side)
import regal.tfenv  # noqa: E402,F401  (OR-Tools before TensorFlow: see regal/tfenv.py)

from regal.train import actors, checkpoints, config, loop  # noqa: E402
from regal.train.actors import BaselineCache, RolloutTask, make_actors, run_rollout  # noqa: E402
from regal.train.checkpoints import load_checkpoint_policy  # noqa: E402
from regal.train.config import TrainConfig, stored_config  # noqa: E402
from regal.train.learner import Episode, Learner, advantages  # noqa: E402
from regal.train.loop import train, validation_rewards  # noqa: E402
from regal.train.pretrain import BestKnown, read_best_known, supervised_targets  # noqa: E402
from regal.train.sources import GraphSource, graph_source  # noqa: E402

__all__ = ["TrainConfig", "RolloutTask", "run_rollout", "GraphSource", "graph_source",
           "make_actors", "BaselineCache",
           "Episode", "Learner", "advantages", "train", "load_checkpoint_policy",
           "validation_rewards", "BestKnown", "read_best_known", "supervised_targets",
           "stored_config"]

# importable from here too, outside __all__ (tests, experiments/transfer.py)
CHECKPOINT_FILE, BASELINES_FILE = config.CHECKPOINT_FILE, config.BASELINES_FILE
HISTORY_FILE, CONFIG_FILE = config.HISTORY_FILE, config.CONFIG_FILE
RESUMABLE_FIELDS = config.RESUMABLE_FIELDS
rollout_rewards = actors.rollout_rewards
save_checkpoint = checkpoints.save_checkpoint
_trim_history = checkpoints._trim_history
_start_from = loop._start_from
