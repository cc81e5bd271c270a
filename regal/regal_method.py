"""The `regal` method (DESIGN §6): one GNN forward pass, then BRKGA with the policy's choices.

The policy picks every op's Beta distributions and elite bias once (greedy by default);
BRKGA then searches at the given budget exactly as plain BRKGA would, with those per-gene
parameters. The forward pass is `regal.policy.NumpyPolicy` (numpy, same weights and logits as
the TensorFlow `Policy`), so the method never imports TensorFlow; training, and a `policy=`
object passed in, may still use the TensorFlow one. Loaded policies are kept per process;
`Solution.extra` records the load, policy and BRKGA times apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from regal.optimizers import Problem, Solution, solve_brkga

__all__ = ["DEFAULT_POLICY_DIR", "REPO_ROOT", "default_policy_dir", "resolve_policy_dir",
           "portable_policy_dir", "policy_content_hash", "load_policy", "solve_regal", "ablated_action"]

# the source tree this package lives in (editable install or a clone) and its data/policy/
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_POLICY_DIR = REPO_ROOT / "data" / "policy"
_LOADED: dict[str, object] = {}


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


def load_policy(policy_dir=None):
    """The policy stored in `policy_dir` (default: the shipped one), loaded once per process
    for inference (a `NumpyPolicy`: no TensorFlow)."""
    path = resolve_policy_dir(policy_dir)
    key = str(path.resolve())
    if key not in _LOADED:
        if not (path / "config.json").exists():
            raise ValueError(f"policy_dir: {path} holds no policy (config.json); train one with "
                             "`regal train` or pass policy_dir")
        from regal.policy.inference import NumpyPolicy
        _LOADED[key] = NumpyPolicy.load(path)
    return _LOADED[key]


def ablated_action(policy, action, learn=None, learn_elite_bias=None):
    """`action` with the heads that `learn`/`learn_elite_bias` switch off reset to plain
    BRKGA's choice (uniform Beta, elite bias 0.7): the Table 3 ablation at inference time."""
    from regal.policy import HEADS, LEARN_PRESETS, gene_parameters

    if learn is None and learn_elite_bias is None:
        return action
    keep = set(LEARN_PRESETS[learn] if isinstance(learn, str) else (learn or ()))
    if learn is None:
        keep = {"affinity", "priority", "transfer"}
    if learn_elite_bias is None or learn_elite_bias:
        keep.add("elite_bias")
    indices = action.indices.copy()
    for column, head in enumerate(HEADS):
        if head not in keep:
            indices[:, column] = policy.default_index[column]
    alpha, beta, elite = gene_parameters(indices, action.num_devices, policy.menus)
    return dataclasses.replace(action, alpha=alpha, beta=beta, elite_bias=elite, indices=indices,
                               log_prob=float("nan"))


def solve_regal(problem: Problem, budget: int, seed: int, *, policy_dir=None, policy=None,
                policy_hash: str | None = None, mode: str = "greedy", learn=None,
                learn_elite_bias=None,
                progress: Callable[[int, float], None] | None = None, **brkga_options) -> Solution:
    """REGAL: the policy's per-gene alpha/beta/elite_bias, then BRKGA at `budget` with `seed`.

    `policy` (a loaded Policy or NumpyPolicy) wins over `policy_dir`; a relative `policy_dir` is looked up
    under the repository root first. `policy_hash`, when given, must match the stored
    policy's content (`policy_content_hash`): a record made with other weights is never
    reproduced silently with the current ones. `mode="sample"` draws the action with
    `seed` instead of taking each head's most likely entry. `learn`/`learn_elite_bias`
    switch heads off at inference (ablations with one set of weights).
    """
    start = time.perf_counter()
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
    action = policy.act(problem.graph, problem.devices, mode=mode, seed=seed)
    action = ablated_action(policy, action, learn, learn_elite_bias)
    params = action.brkga_params()
    acted = time.perf_counter()
    found = solve_brkga(problem, budget, seed, progress=progress, **params, **brkga_options)
    done = time.perf_counter()
    counts = {head: np.bincount(action.indices[:, i], minlength=len(policy.menus[head])).tolist()
              for i, head in enumerate(("affinity", "priority", "transfer", "elite_bias"))}
    extra = dict(found.extra)
    extra.update(policy_load_time=loaded - start, policy_time=acted - loaded,
                 brkga_time=done - acted, policy_mode=mode, menu_counts=counts,
                 policy_source=source)
    return dataclasses.replace(found, extra=extra)
