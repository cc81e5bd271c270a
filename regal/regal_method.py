"""The `regal` method (docs/design.md §6): one GNN forward pass, then REGAL's search pipeline
(`regal.search.pipeline`) with the policy's choices.

The policy picks every op's key distributions (relative to the graph's reference solution,
`regal.policy.reference`) and elite bias once (greedy by default); BRKGA then searches in
slot space, its first population seeded with the reference heuristics' solutions and a share
of its mutants kept uniform (`search_params`), so that a poor choice costs little against
plain BRKGA; then climbs race on the rest of the budget (`regal.search.schedule`). The
reference's evaluations count in the budget. The forward pass is `regal.policy.NumpyPolicy`
(numpy, same weights and logits as the TensorFlow `Policy`), so the method never imports
TensorFlow; training, and a `policy=` object passed in, may still use the TensorFlow one.
Loaded policies are kept per process; `Solution.extra` records the load, policy, BRKGA and
polish times apart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from regal.optimizers import Problem, Solution
from regal.workers import single_threaded_blas

__all__ = ["DEFAULT_POLICY_DIR", "REPO_ROOT", "UNIFORM_MUTANT_FRACTION", "default_policy_dir",
           "same_policy_dir", "resolve_policy_dir", "portable_policy_dir",
           "policy_content_hash", "load_policy", "solve_regal", "ablated_action",
           "search_params", "solve_regal_paper", "load_move_ranker", "RANKER_DRAW"]

# the source tree this package lives in (editable install or a clone) and its data/policy/
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_POLICY_DIR = REPO_ROOT / "data" / "policy"
_LOADED: dict[str, tuple] = {}   # folder -> (its files' signature, the policy)
# share of each generation's mutants kept uniform when the policy biases the keys ("do no
# harm": plain BRKGA's exploration never stops; docs/design.md §6)
UNIFORM_MUTANT_FRACTION = 0.5
# the learned move ranker (data/policy/), and how many times its batch each climb step
# draws for it to choose from (`regal.search.advantage`, `regal.search.climb` step 6)
MOVE_RANKER_FILE = "move_ranker.npz"
RANKER_DRAW = 4
_RANKERS: dict[str, tuple] = {}  # file -> (its signature, the ranker)


def default_policy_dir() -> Path:
    """$REGAL_POLICY_DIR if set, else the shipped data/policy/ next to the package."""
    return Path(os.environ.get("REGAL_POLICY_DIR") or DEFAULT_POLICY_DIR)


def resolve_policy_dir(policy_dir=None) -> Path:
    """`policy_dir` as a path to read: a relative path that exists under the repository root
    is taken from there (records store it so, see `portable_policy_dir`), else from the cwd."""
    if policy_dir is None:
        return default_policy_dir()
    path = Path(policy_dir)
    if not path.is_absolute() and (REPO_ROOT / path).exists():
        return REPO_ROOT / path
    return path


def same_policy_dir(first, second) -> bool:
    """Whether two policy folders, as records store them (`portable_policy_dir`) or as given,
    are the same folder."""
    return resolve_policy_dir(first).resolve() == resolve_policy_dir(second).resolve()


def portable_policy_dir(policy_dir) -> str:
    """`policy_dir` relative to the repository root when it lies inside it (so that records
    written in one clone resume in another), else absolute."""
    path = resolve_policy_dir(policy_dir).resolve()
    try:
        return path.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def policy_content_hash(policy_dir=None) -> str:
    """Content hash of a stored policy (config + weight arrays, not file bytes), 16 hex
    digits: records carry it so that results of a replaced policy are never reused."""
    path = resolve_policy_dir(policy_dir)
    digest = hashlib.sha256((path / "config.json").read_bytes())
    with np.load(path / "weights.npz") as stored:
        for key in sorted(stored.files):
            array = np.ascontiguousarray(stored[key])
            digest.update(f"{key}{array.dtype.str}{array.shape}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def _file_signature(*paths: Path) -> tuple:
    """What a per-process copy of files is checked against: each file's path, modification
    time and size, so that a file replaced in place (a policy retrained into the same
    folder) is read again rather than answered from memory."""
    out = []
    for path in paths:
        try:
            stat = path.stat()
        except FileNotFoundError:
            out.append((str(path.resolve()), None, None))
        else:
            out.append((str(path.resolve()), stat.st_mtime_ns, stat.st_size))
    return tuple(out)


def load_policy(policy_dir=None):
    """The policy stored in `policy_dir` (default: the shipped one), loaded once per process
    for inference (a `NumpyPolicy`: no TensorFlow) and again when its files change."""
    path = resolve_policy_dir(policy_dir)
    key = str(path.resolve())
    signature = _file_signature(path / "config.json", path / "weights.npz")
    if key not in _LOADED or _LOADED[key][0] != signature:   # one copy per folder
        if not (path / "config.json").exists():
            raise ValueError(f"policy_dir: {path} holds no policy (config.json); train one with "
                             "`regal train` or pass policy_dir")
        from regal.policy.inference import NumpyPolicy
        _LOADED[key] = (signature, NumpyPolicy.load(path))
    return _LOADED[key][1]


def ablated_action(policy, action, learn=None, learn_elite_bias=None):
    """`action` with the heads that `learn`/`learn_elite_bias` switch off reset to plain
    BRKGA's choice (uniform keys, elite bias 0.7): the Table 3 ablation at inference time."""
    from regal.policy.menus import LEARN_PRESETS, make_action

    if learn is None and learn_elite_bias is None:
        return action
    keep = set(LEARN_PRESETS[learn] if isinstance(learn, str) else (learn or ()))
    if learn is None:
        keep = {"affinity", "priority", "transfer"}
    if learn_elite_bias is None or learn_elite_bias:
        keep.add("elite_bias")
    n = len(action.choices.affinity)
    choices = action.choices._replace(**{
        head: np.full(n, getattr(policy.default, head), np.int32)
        for head in action.choices._fields if head not in keep})
    return make_action(choices, float("nan"), action.reference, policy.menus)


def load_move_ranker(move_ranker="shipped"):
    """A fresh `MoveRanker` (its own timers) for one run, or None: "shipped" is
    `data/policy/move_ranker.npz` (whatever the policy: the ranker reads the moves, not the
    graph's embedding), None or "none" is no ranker (the climbs' own order: the no-policy
    twin's), anything else a path. Files are read once per process."""
    from regal.search.advantage import MoveRanker

    if move_ranker is None or move_ranker == "none":
        return None
    path = DEFAULT_POLICY_DIR / MOVE_RANKER_FILE if move_ranker == "shipped" \
        else Path(move_ranker)
    if not path.is_file():
        raise ValueError(f"move_ranker: no such file {str(path)!r}")
    key, signature = str(path.resolve()), _file_signature(path)
    if key not in _RANKERS or _RANKERS[key][0] != signature:   # one copy per file
        _RANKERS[key] = (signature, MoveRanker.load(path))
    loaded = _RANKERS[key][1]
    return MoveRanker(loaded.layers, loaded.mean, loaded.scale, loaded.meta, loaded.gates)


def search_params(action, seed_population: bool = True,
                  uniform_mutant_fraction: float = UNIFORM_MUTANT_FRACTION) -> dict:
    """`regal.search.pipeline.brkga_phase` keyword arguments that run BRKGA with `action`: its per-gene Betas and elite
    bias in slot space, the slot -> device gene order (none when the placement keys are
    uniform: slots and devices are then alike), the reference's candidates in the first
    population (`seed_population`), a uniform share of the mutants when keys are biased,
    and the evaluations the reference cost (counted in the budget)."""
    params = action.brkga_params()
    reference = action.reference
    order = None if action.placement_is_uniform() else reference.gene_order()
    if order is not None:
        params["gene_order"] = order
    if seed_population:
        params["initial"] = reference.seeds if order is None else reference.slot_space(
            reference.seeds)
    if params["alpha"] is not None and uniform_mutant_fraction:
        params["uniform_mutant_fraction"] = float(uniform_mutant_fraction)
    params["spent"] = int(reference.evaluations)
    return params


def solve_regal(problem: Problem, budget: int, seed: int, *, policy_dir=None, policy=None,
                policy_hash: str | None = None, mode: str = "greedy", learn=None,
                learn_elite_bias=None, seed_population: bool = True,
                uniform_mutant_fraction: float = UNIFORM_MUTANT_FRACTION,
                polish_share: float | None = None, fresh_climbs: int | None = None,
                race=None, move_ranker="shipped", ranked_batch: int | None = None,
                ranked_opening: tuple[int, float] | None = None,
                unranked_share: float = 0.0, time_limit: float | None = None,
                progress: Callable[[int, float], None] | None = None,
                should_stop: Callable[[], bool] | None = None, **brkga_options) -> Solution:
    """REGAL: the policy's per-op choices relative to the reference solution, then BRKGA,
    then climbs from BRKGA's best and afresh from the heuristic starts, raced
    (`regal.search.pipeline`),
    `budget` evaluations in all (the reference's included) with `seed`.

    `policy` (a loaded Policy or NumpyPolicy) wins over `policy_dir`; a relative `policy_dir` is looked up
    under the repository root first. `policy_hash`, when given, must match the stored
    policy's content (`policy_content_hash`): a record made with other weights is never
    reproduced silently with the current ones. `mode="sample"` draws the action with
    `seed` instead of taking each head's most likely entry. `learn`/`learn_elite_bias`
    switch heads off at inference (ablations with one set of weights). `seed_population`
    puts the reference heuristics' solutions in the first population;
    `uniform_mutant_fraction` of the mutants stay uniform (see `search_params`).
    `polish_share` of the budget, and of `time_limit` seconds when given, goes to the
    climbs (0: BRKGA only), where `fresh_climbs` climbs afresh from the heuristic starts
    race the one from BRKGA's best by `race` (0: one climb from BRKGA's best): the fields
    of `regal.search.schedule.Schedule`, defaults `DEFAULT_SCHEDULE`. `move_ranker` chooses
    which of each climb step's `RANKER_DRAW` x batch drawn neighbours are evaluated
    (`load_move_ranker`: the shipped learned ranker by default, "none" for the climbs' own
    order); `ranked_batch`, when given, is the batch of every ranked climb step (the climb's
    `batch_size`, so its patience follows it) instead of the climb's own (adapted between 8
    and 32): a probe, `experiments/ceilings.py` arm `policy-batch-8`; `ranked_opening`
    (batch, evaluations per op), when given, caps each ranked climb's batch at that batch for
    its first evaluations (`Climb`'s `opening`; arm `policy-opening-8`); `unranked_share`
    of each ranked batch goes to evaluation in the drawing order, unranked (`Climb`'s; arms
    `policy-unranked-25`, `policy-unranked-50`). `should_stop()`
    ends the search early.
    """
    from regal.search.climb import check_opening, check_unranked_share
    from regal.search.pipeline import run_pipeline, schedule_of

    start = time.perf_counter()
    schedule = schedule_of(polish_share, fresh_climbs, race)  # a bad one fails before any work
    if ranked_batch is not None and (isinstance(ranked_batch, bool)
                                     or int(ranked_batch) != ranked_batch or ranked_batch < 1):
        raise ValueError(f"ranked_batch must be a positive integer, got {ranked_batch!r}")
    if ranked_opening is not None:
        ranked_opening = check_opening(ranked_opening)
    unranked_share = check_unranked_share(unranked_share)
    source = "object"
    if policy is None:
        source = str(resolve_policy_dir(policy_dir))
        if policy_hash is not None:
            stored = policy_content_hash(policy_dir)
            if stored != policy_hash:
                raise ValueError(f"policy_hash: {source} holds a policy with content hash "
                                 f"{stored}, not {policy_hash}")
        policy = load_policy(policy_dir)
    loaded = time.perf_counter()
    action = policy.act(problem.graph, problem.devices, mode=mode, seed=seed,
                        objective=problem.objective)
    action = ablated_action(policy, action, learn, learn_elite_bias)
    params = search_params(action, seed_population, uniform_mutant_fraction)
    ranker = load_move_ranker(move_ranker)
    climb_options = None if ranker is None else dict(rank_moves=ranker, draw=RANKER_DRAW)
    if climb_options is not None:        # the ranked climbs' probes (none by default)
        if ranked_batch is not None:
            climb_options["batch_size"] = int(ranked_batch)
        if ranked_opening is not None:
            climb_options["opening"] = ranked_opening
        if unranked_share:
            climb_options["unranked_share"] = unranked_share
    acted = time.perf_counter()
    # one BLAS limit for the whole search, not one per ranked step (`single_threaded_blas`)
    with contextlib.nullcontext() if ranker is None else single_threaded_blas():
        found = run_pipeline(problem, budget, seed, params, schedule=schedule,
                             time_limit=time_limit, started=start, progress=progress,
                             should_stop=should_stop, climb_options=climb_options,
                             **brkga_options)
    done = time.perf_counter()
    counts = {head: np.bincount(getattr(action.choices, head),
                                minlength=len(policy.menus[head])).tolist()
              for head in action.choices._fields}
    extra = dict(found.extra)
    reference = action.reference
    extra.update(policy_load_time=loaded - start, policy_time=acted - loaded,
                 brkga_time=done - acted - extra.get("polish_time", 0.0),
                 search_time=done - acted, policy_mode=mode, menu_counts=counts,
                 ranker_time=0.0 if ranker is None else ranker.elapsed,
                 policy_source=source, reference_source=reference.source,
                 reference_value=reference.value, reference_evaluations=reference.evaluations)
    return dataclasses.replace(found, extra=extra)


def solve_regal_paper(problem: Problem, budget: int, seed: int = 0, *, policy_dir=None,
                      **options) -> Solution:
    """The paper's configuration: the policy's BRKGA on the whole budget, no climbs (REGAL as
    published, Paliwal et al. 2020), kept runnable by name (`regal-paper`) beside the
    pipeline. `solve_regal` with `polish_share` 0; `options` are its other options
    (`policy_dir` named here, so that `--policy` reaches it from the command line)."""
    if "polish_share" in options:
        raise ValueError("polish_share: regal-paper spends the whole budget on BRKGA; use "
                         "the regal method to give the climbs a share")
    found = solve_regal(problem, budget, seed, policy_dir=policy_dir, polish_share=0.0,
                        **options)
    return dataclasses.replace(found, method="regal-paper")

