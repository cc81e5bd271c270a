"""Training of REGAL's policy (REINFORCE, optionally after supervised pretraining), split
Acme-style into actors, a learner and a loop.

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
uninterrupted run). TensorFlow is imported only inside the learner side, so worker processes
that unpickle `run_rollout` never load it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before any TensorFlow import (learner side)
import regal.tfenv  # noqa: E402,F401  (OR-Tools before TensorFlow: see regal/tfenv.py)

import numpy as np  # noqa: E402

from regal.files import JsonLinesWriter, Lock, write_bytes, write_json  # noqa: E402
from regal.graph import ComputationGraph  # noqa: E402
from regal.policy.menus import PRIOR_LOGIT  # noqa: E402
from regal.regal_method import UNIFORM_MUTANT_FRACTION  # noqa: E402
from regal.workers import Workers  # noqa: E402

__all__ = ["TrainConfig", "RolloutTask", "run_rollout", "GraphSource", "graph_source",
           "make_actors", "BaselineCache",
           "Episode", "Learner", "advantages", "train", "load_checkpoint_policy",
           "validation_rewards", "BestKnown", "read_best_known", "supervised_targets",
           "stored_config"]

CHECKPOINT_FILE = "checkpoint.npz"
BASELINES_FILE = "baselines.json"
HISTORY_FILE = "history.jsonl"
CONFIG_FILE = "train_config.json"
# may change between a run and its resume; everything else must match
RESUMABLE_FIELDS = ("steps", "max_minutes", "workers", "ray", "progress", "checkpoint_minutes")


# ---------------------------------------------------------------------------
# configuration


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
                    polish_share=self.polish_share)


# ---------------------------------------------------------------------------
# graph sources: a folder of graph files, or a synth recipe ("train", "valid:64")


@dataclass(frozen=True)
class GraphSource:
    """An indexable set of graphs; `spec` says where they come from."""

    spec: str
    count: int
    paths: tuple = ()      # folder source
    recipe: object = None  # recipe source

    def __getitem__(self, index: int) -> ComputationGraph:
        return _load_source_graph(self, int(index))


@lru_cache(maxsize=2048)
def _load_source_graph(source: GraphSource, index: int) -> ComputationGraph:
    if source.recipe is not None:
        from regal.synth import graph_at
        return graph_at(source.recipe, index)
    from regal.io import load_graph
    return load_graph(source.paths[index])


def graph_source(spec: str) -> GraphSource:
    """A folder of graph files (.npz/.pbtxt/.pb), or `RECIPE[:COUNT]` of `regal.synth.RECIPES`."""
    path = Path(spec)
    if path.is_dir():
        files = tuple(str(p) for p in sorted(path.iterdir())
                      if p.is_file() and p.suffix.lower() in (".npz", ".pbtxt", ".pb"))
        if not files:
            raise ValueError(f"graphs: {spec} holds no graph files (.npz, .pbtxt, .pb)")
        return GraphSource(spec, len(files), paths=files)
    from regal.synth import RECIPES, recipe_named
    name, _, count = str(spec).partition(":")
    if name not in RECIPES:
        raise ValueError(f"graphs: {spec!r} is neither a folder nor a recipe "
                         f"({', '.join(RECIPES)}, optionally NAME:COUNT)")
    try:
        recipe = recipe_named(name, int(count) if count else None)
    except ValueError as exc:
        raise ValueError(f"graphs: {spec!r}: {exc}") from None
    return GraphSource(spec, recipe.count, recipe=recipe)


# ---------------------------------------------------------------------------
# actor side (numpy only)


@dataclass(frozen=True)
class RolloutTask:
    """One BRKGA run; `params` are `regal.search.pipeline.brkga_phase` keywords (empty =
    plain BRKGA) and, optionally, `polish_share`: that share of the budget goes to a climb
    from BRKGA's best (`regal.search.pipeline.run_pipeline`, as the `regal` method runs)."""

    graph: ComputationGraph
    devices: int
    budget: int
    seed: int
    objective: str = "peak_memory"
    population_size: int = 100
    params: dict = field(default_factory=dict)


def run_rollout(task: RolloutTask) -> float:
    """BRKGA with the task's search parameters (then the polish, if it has a share); returns
    the best objective found."""
    from regal.optimizers import Problem
    from regal.search.pipeline import run_pipeline
    from regal.search.schedule import Schedule
    from regal.sim import DeviceSpec

    problem = Problem(task.graph, DeviceSpec(task.devices), task.objective)
    params = dict(task.params)
    share = float(params.pop("polish_share", 0.0))   # 0: BRKGA only, draw for draw
    # no fresh climb from the heuristic starts: it would not depend on the policy's action
    solution = run_pipeline(problem, task.budget, task.seed, params,
                            schedule=Schedule(share, fresh_climbs=0, race=()),
                            population_size=task.population_size)
    return float(solution.value)


def make_actors(workers: int = 2, use_ray: bool = False) -> Workers:
    """The rollout workers (`actors.map(run_rollout, tasks)`): a process pool whose workers
    leave Ctrl-C to the loop (which checkpoints), Ray (a task whose worker died runs again, as
    Ray's default of 3 retries has it), or this process for one worker."""
    return Workers(workers, ray=use_ray, ignore_interrupts=True, retries=3)


class BaselineCache:
    """Uniform-BRKGA objective per (graph, devices, seed, budget, objective), kept on disk."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.values: dict[str, float] = {}
        if path is not None and path.exists():
            # float(): an infinite value is stored as "Infinity" (regal.files.json_text)
            self.values = {key: float(value)
                           for key, value in json.loads(path.read_text()).items()}

    @staticmethod
    def key(graph: ComputationGraph, devices: int, seed: int, budget: int, objective: str,
            population_size: int) -> str:
        return f"{graph.fingerprint()}|{devices}|{seed}|{budget}|{objective}|{population_size}"

    def save(self) -> None:
        if self.path is not None:
            write_json(self.path, self.values, sort_keys=True)


def rollout_rewards(actors, cache: BaselineCache, jobs: list[tuple]) -> list[float]:
    """Rewards of `jobs` = [(graph, devices, seed, params, budget, objective, population)];
    uniform baselines come from `cache` or run in the same batch as the policy's rollouts."""
    keys = [BaselineCache.key(g, d, s, b, o, p) for g, d, s, _, b, o, p in jobs]
    missing = {}
    for key, (g, d, s, _, b, o, p) in zip(keys, jobs):
        if key not in cache.values and key not in missing:
            missing[key] = RolloutTask(g, d, b, s, o, p)
    tasks = [RolloutTask(g, d, b, s, o, p, params) for g, d, s, params, b, o, p in jobs]
    values = actors.map(run_rollout, tasks + list(missing.values()))
    cache.values.update(zip(missing, values[len(tasks):]))
    rewards = []
    for key, value in zip(keys, values[:len(tasks)]):
        base = cache.values[key]
        rewards.append((base - value) / base if base > 0 else 0.0)
    return rewards


# ---------------------------------------------------------------------------
# learner side (TensorFlow)


@dataclass
class Episode:
    """K sampled actions on one graph and their rewards."""

    features: object        # regal.policy.GraphFeatures (with its reference)
    choices: list           # K regal.policy.MenuChoices
    rewards: np.ndarray     # [K]


def advantages(rewards: list[np.ndarray]) -> list[np.ndarray]:
    """Per-graph mean baseline, then one scale for the whole step (std of all advantages)."""
    centred = [np.asarray(r, np.float64) - np.mean(r) for r in rewards]
    scale = np.concatenate(centred).std() + 1e-8
    return [c / scale for c in centred]


class Learner:
    """One REINFORCE or supervised step per call; owns the policy's Adam optimizer."""

    def __init__(self, policy, learning_rate: float = 1e-3, entropy_coef: float = 1e-3,
                 clip_norm: float = 1.0) -> None:
        import tensorflow as tf
        import tf_keras

        self.tf = tf
        self.policy = policy
        self.entropy_coef = float(entropy_coef)
        self.clip_norm = float(clip_norm)
        self.optimizer = tf_keras.optimizers.Adam(learning_rate)
        self.optimizer.build(policy.trainable_variables)

    def _apply(self, tape, loss) -> float:
        tf = self.tf
        variables = self.policy.trainable_variables
        grads = tape.gradient(loss, variables)
        grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, variables)]
        clipped, norm = tf.clip_by_global_norm(grads, self.clip_norm)
        self.optimizer.apply_gradients(zip(clipped, variables))
        return float(norm)

    def update(self, episodes: list[Episode]) -> dict:
        """REINFORCE (`losses.reinforce_loss`) with the per-graph mean baseline, advantages
        scaled by their std over the step, log-probabilities and entropies per op."""
        from regal.policy.losses import reinforce_loss

        tf = self.tf
        centred = [np.asarray(e.rewards, np.float64) - np.mean(e.rewards) for e in episodes]
        scale = np.concatenate(centred).std() + 1e-8
        rewards = np.concatenate([np.asarray(e.rewards, np.float64) for e in episodes]) / scale
        baselines = np.concatenate([np.full(len(e.rewards), np.mean(e.rewards))
                                    for e in episodes]) / scale
        with tf.GradientTape() as tape:
            log_probs, entropy = [], tf.constant(0.0)
            for episode in episodes:
                n = float(episode.features.num_nodes)
                for k, choices in enumerate(episode.choices):
                    log_prob, ent = self.policy.evaluate(episode.features, None, choices)
                    log_probs.append(log_prob / n)
                    if k == 0:
                        entropy += ent / n
            mean_entropy = entropy / len(episodes)
            loss = reinforce_loss(log_probs, rewards, baselines, mean_entropy, self.entropy_coef)
            pg_loss = loss + self.entropy_coef * mean_entropy
        norm = self._apply(tape, loss)
        return {"loss": float(loss), "pg_loss": float(pg_loss),
                "entropy_per_op": float(mean_entropy), "grad_norm": norm}

    def supervised_update(self, targets: list[tuple]) -> dict:
        """One step of `losses.supervised_loss` on [(features, target tables)]: the mean over
        graphs of the best-known solutions' negative log-likelihood per op."""
        from regal.policy.losses import supervised_loss

        tf = self.tf
        with tf.GradientTape() as tape:
            total = tf.constant(0.0)
            for features, tables in targets:
                total += supervised_loss(self.policy.outputs(features), tables) \
                    / float(features.num_nodes)
            loss = total / len(targets)
        norm = self._apply(tape, loss)
        return {"loss": float(loss), "nll_per_op": float(loss), "grad_norm": norm}

    def state(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.optimizer.variables]

    def set_state(self, values: list[np.ndarray]) -> None:
        slots = self.optimizer.variables
        if len(values) != len(slots):
            raise ValueError("checkpoint: optimizer state does not match the policy")
        for var, value in zip(slots, values):
            var.assign(value)


# ---------------------------------------------------------------------------
# checkpoints


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


# ---------------------------------------------------------------------------
# supervised targets: a best-known store (regal.bestknown's JSON lines)


@dataclass(frozen=True, eq=False)
class BestKnown:
    """One stored best-known solution as training reads it (`read_best_known`)."""

    fingerprint: str
    devices: int
    memory_limit: tuple | None
    objective: str
    value: float
    placement: np.ndarray          # [n] int
    priority: np.ndarray           # [n] (ranks or keys: only the order matters)
    transfer_priority: np.ndarray  # [n]

    @classmethod
    def from_entry(cls, entry) -> "BestKnown":
        """A `regal.bestknown.Entry` with numpy vectors."""
        fingerprint, devices, limit, objective = entry.key()
        return cls(fingerprint, devices, limit, objective, float(entry.value),
                   np.asarray(entry.placement, np.int64),
                   np.asarray(entry.priority, np.float64),
                   np.asarray(entry.transfer_priority, np.float64))


def read_best_known(path) -> list[BestKnown]:
    """The best entry per (fingerprint, devices, memory limit, objective) of a best-known
    store, or of several given as one comma-separated string ("a.jsonl,b.jsonl")
    (`regal.bestknown.read_stores`). ValueError naming the file when one is missing or none
    holds a solution."""
    from regal.bestknown import read_stores

    paths = [p for p in str(path).split(",") if p] if isinstance(path, str) else [path]
    try:
        best = read_stores(paths)
    except ValueError as exc:
        raise ValueError(f"pretrain_from: {exc}") from None
    if not best:
        raise ValueError(f"pretrain_from: {path} holds no best-known solution")
    return [BestKnown.from_entry(entry) for entry in best.values()]


def supervised_targets(entries: list[BestKnown], source: GraphSource) -> list[tuple]:
    """[(graph, DeviceSpec, entry)] for the entries whose graph is in `source` (matched by
    fingerprint; every graph of `source` is loaded once for it)."""
    from regal.sim import DeviceSpec

    wanted = {e.fingerprint for e in entries}
    graphs = {}
    for i in range(source.count):
        graph = source[i]
        if graph.fingerprint() in wanted:
            graphs[graph.fingerprint()] = graph
    out = []
    for e in entries:
        graph = graphs.get(e.fingerprint)
        if graph is None or graph.num_nodes != len(e.placement) or e.placement.max() >= e.devices:
            continue
        spec = DeviceSpec(e.devices, memory_limit=None if e.memory_limit is None
                          else list(e.memory_limit))
        out.append((graph, spec, e))
    if not out:
        raise ValueError(f"pretrain_from: none of its {len(entries)} entries is a graph of "
                         f"{source.spec}")
    return out


def _target_tables(policy, graph, spec, entry: BestKnown) -> tuple:
    """(features, per-head target log-likelihood tables) of one best-known solution."""
    from regal.policy.menus import target_log_likelihoods
    from regal.policy.reference import order_keys

    features = policy.features(graph, spec, entry.objective)
    reference = features.reference
    tables = target_log_likelihoods(policy.menus, reference, reference.target_slots(entry.placement),
                                    order_keys(entry.priority),
                                    order_keys(entry.transfer_priority))
    return features, {h: t for h, t in tables.items() if h in policy.learned}


# ---------------------------------------------------------------------------
# the loop


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


def _validate(policy, val: GraphSource, config: TrainConfig, actors, cache) -> float:
    """Mean improvement of the greedy policy over uniform BRKGA on fixed val graphs and seeds."""
    return float(np.mean(validation_rewards(
        policy, val, range(min(config.val_graphs, val.count)), config.devices, config.val_seeds,
        config.budget, actors, cache, config.objective, config.population_size,
        polish_share=config.polish_share, **config.search_kwargs())))


def validation_rewards(policy, val: GraphSource, indices, devices=(2, 4), seeds: int = 2,
                       budget: int = 1000, actors=None, cache=None, objective="peak_memory",
                       population_size: int = 100, seed_population: bool = True,
                       uniform_mutant_fraction: float = UNIFORM_MUTANT_FRACTION,
                       polish_share: float = 0.0) -> np.ndarray:
    """Greedy policy vs uniform BRKGA, `[graph, seed]` relative improvements: graph `i` of
    `val` on `devices[i % len(devices)]` devices with BRKGA seeds 1000.. (the measurement
    `train` logs as val_improvement; usable to compare any two stored policies). With
    `polish_share` the policy's runs end with the local-search polish (BRKGA's do not)."""
    from regal.regal_method import search_params
    from regal.sim import DeviceSpec

    jobs = []
    indices = list(indices)
    for i in indices:
        graph = val[i]
        d = devices[i % len(devices)]
        action = policy.act(graph, DeviceSpec(d), mode="greedy", objective=objective)
        params = dict(search_params(action, seed_population, uniform_mutant_fraction),
                      polish_share=polish_share)
        for s in range(seeds):
            jobs.append((graph, d, 1000 + s, params, budget, objective, population_size))
    rewards = rollout_rewards(actors or Workers(1), cache or BaselineCache(), jobs)
    return np.asarray(rewards).reshape(len(indices), seeds)


def _scalar(tag: str, value: float) -> None:
    """A TensorBoard scalar written with core TF only (`tf.summary.scalar` needs the
    tensorboard package, which is not a dependency); TensorBoard's scalar plugin reads it."""
    import tensorflow as tf
    from tensorflow.core.framework import summary_pb2

    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    tf.summary.write(tag, tf.constant(float(value), tf.float32), metadata=metadata)


class _StopFlag:
    """Turns SIGTERM/SIGINT into a flag the loop checks after each step (second one raises)."""

    def __init__(self) -> None:
        self.raised = False
        self.signum = None  # the first signal's number (the command exits 128 + it)
        self.previous = {}

    def __enter__(self):
        import threading
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.raised:
            raise KeyboardInterrupt
        self.raised, self.signum = True, signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def _reinforce_step(policy, learner: Learner, train_set: GraphSource, config: TrainConfig,
                    rng: np.random.Generator, actors, cache: BaselineCache) -> tuple[dict, np.ndarray]:
    """Samples graphs, devices and K actions each (all from the loop's rng), gathers their
    rewards (S common seeds per action) and takes one REINFORCE step."""
    from regal.sim import DeviceSpec

    picks = rng.integers(train_set.count, size=config.graphs_per_step)
    devs = rng.choice(np.asarray(config.devices), size=config.graphs_per_step)
    episodes, jobs = [], []
    for index, d in zip(picks, devs):
        graph, d = train_set[int(index)], int(d)
        if config.augment:
            from regal.synth import augment
            graph = augment(graph, rng, config.augment)
        features = policy.features(graph, DeviceSpec(d), config.objective)
        actions = [policy.act(features, mode="sample", rng=rng) for _ in range(config.samples)]
        episodes.append(Episode(features, [a.choices for a in actions], None))
        for a in actions:
            params = config.rollout_params(a)
            jobs += [(graph, d, s, params, config.budget, config.objective,
                      config.population_size) for s in range(config.seeds_per_action)]
    rewards = np.asarray(rollout_rewards(actors, cache, jobs)).reshape(
        config.graphs_per_step, config.samples, config.seeds_per_action).mean(axis=2)
    for episode, r in zip(episodes, rewards):
        episode.rewards = r
    stats = learner.update(episodes)
    record = {"mode": "reinforce", "reward": float(rewards.mean()),
              "rewards": rewards.round(6).tolist(), "graphs": [int(i) for i in picks],
              "devices": [int(d) for d in devs], **stats}
    return record, rewards


def _start_from(policy, folder: Path) -> None:
    """`policy` given the weights stored in `folder` (a saved policy of the same shape and
    menus): a new run that fine-tunes it. ValueError naming the folder otherwise."""
    from regal.policy import Policy

    try:
        stored = Policy.load(folder)   # reads and checks the weights against its config
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"init_from: {folder} holds no readable policy ({exc})") from None
    for key in ("hidden", "num_layers", "menus", "learn", "learn_elite_bias"):
        theirs, mine = stored.config.get(key), policy.config.get(key)
        if json.loads(json.dumps(theirs)) != json.loads(json.dumps(mine)):
            raise ValueError(f"init_from: {folder} has {key} {theirs!r}, this run {mine!r}")
    policy.net.set_weights(stored.net.get_weights())


def train(config: TrainConfig, resume: bool = False, actors=None) -> dict:
    """Runs (or resumes) training until `config.steps`, `max_minutes` or a signal; checkpoints,
    exports the final policy to `RUN/policy/` and returns a summary (`signal`: the number of
    the signal that stopped it, else None). The run folder is locked before TensorFlow
    loads: a second run in it is refused at once (ValueError)."""
    run, config, lock = _prepare_run(config, resume)
    with lock:
        with regal.tfenv.quiet_native_logs():  # `regal train` hides absl's and CUDA's lines
            import tensorflow  # noqa: F401
        return _train_in(run, config, resume, actors)


def _train_in(run: Path, config: TrainConfig, resume: bool, actors) -> dict:
    """`train` in its prepared, locked run folder."""
    import tensorflow as tf
    from tqdm import tqdm

    from regal.policy import Policy

    train_set, val_set = graph_source(config.train), graph_source(config.val)
    cache = BaselineCache(run / BASELINES_FILE)
    policy = Policy(**config.policy_kwargs())
    if config.init_from and not resume:
        _start_from(policy, Path(config.init_from))
    policy.eager_max_ops = 0  # thousands of forward passes: trace once, always the same path
    learner = Learner(policy, config.learning_rate, config.entropy_coef, config.clip_norm)
    rng = np.random.default_rng(config.seed)
    step, wall_before = 0, 0.0
    if resume:
        meta, weights, opt_state = _read_checkpoint(run)
        policy.net.set_weights(weights)
        learner.set_state(opt_state)
        rng.bit_generator.state = meta["rng"]
        step, wall_before = int(meta["step"]), float(meta["wall_time"])
    _trim_history(run / HISTORY_FILE, step)
    targets = []
    if config.pretrain_steps > step:
        targets = supervised_targets(read_best_known(config.pretrain_from), train_set)

    own_actors = actors is None
    actors = actors or make_actors(config.workers, config.ray)
    writer = tf.summary.create_file_writer(str(run / "tb"))
    start = time.perf_counter()
    last_save = start
    stopped = "steps"
    last_val = None
    bar = tqdm(total=config.steps, initial=min(step, config.steps), unit="step", desc="train",
               disable=not config.progress)
    try:
        with _StopFlag() as stop, JsonLinesWriter(run / HISTORY_FILE, _in_use(run)) as history:
            while step < config.steps:
                elapsed = wall_before + time.perf_counter() - start
                if stop.raised:
                    stopped = "signal"
                    break
                if config.max_minutes is not None and elapsed >= 60 * config.max_minutes:
                    stopped = "time"
                    break
                if step < config.pretrain_steps:
                    # -- supervised: best-known solutions' likelihood under the policy
                    picks = rng.integers(len(targets), size=config.graphs_per_step)
                    stats = learner.supervised_update([_target_tables(policy, *targets[int(i)])
                                                       for i in picks])
                    step += 1
                    record = {"step": step, "mode": "supervised",
                              "entries": [int(i) for i in picks], **stats}
                    rewards = None
                else:
                    record, rewards = _reinforce_step(policy, learner, train_set, config, rng,
                                                      actors, cache)
                    step += 1
                    record["step"] = step
                if config.val_every and step % config.val_every == 0:
                    last_val = _validate(policy, val_set, config, actors, cache)
                    record["val_improvement"] = last_val
                record["wall_time"] = wall_before + time.perf_counter() - start
                history.write(record)
                with writer.as_default(step=step):
                    if rewards is not None:
                        _scalar("reward/mean", record["reward"])
                        _scalar("policy/entropy_per_op", record["entropy_per_op"])
                    else:
                        _scalar("loss/supervised_nll_per_op", record["nll_per_op"])
                    _scalar("policy/grad_norm", record["grad_norm"])
                    _scalar("loss/total", record["loss"])
                    if "val_improvement" in record:
                        _scalar("val/improvement", record["val_improvement"])
                bar.update(1)
                shown = f"{record['reward']:+.4f}" if rewards is not None \
                    else f"nll {record['nll_per_op']:.3f}"
                bar.set_postfix(reward=shown,
                                val="-" if last_val is None else f"{last_val:+.4f}",
                                refresh=False)
                if time.perf_counter() - last_save >= 60 * config.checkpoint_minutes:
                    save_checkpoint(run, policy, learner, rng, step,
                                    wall_before + time.perf_counter() - start, cache)
                    last_save = time.perf_counter()
            wall = wall_before + time.perf_counter() - start
            save_checkpoint(run, policy, learner, rng, step, wall, cache)
            policy.save(run / "policy")
    finally:
        bar.close()
        writer.close()
        if own_actors:
            actors.close()
    return {"run": str(run), "step": step, "stopped": stopped, "wall_time": wall,
            "val_improvement": last_val, "policy": str(run / "policy"), "signal": stop.signum}
