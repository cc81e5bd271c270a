"""One entry point (`generate`) over the families, and splits as recipes: a split is a
`SplitRecipe`, graph `i` of it is rebuilt by `graph_at(recipe, i)`, and `materialize` writes
a split's graph files with a recipe.json that says how to make them again."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from regal.graph import ComputationGraph
from regal.synth.families import (_CNN_HEAD, _CNN_PROLOGUE, _INC_HEAD, _INC_PROLOGUE, _MAX_OPS,
                                  _TF_HEAD, _TF_PROLOGUE, _check_num_ops, _rng,
                                  inception_like, layered_cnn, random_dag, transformer_like)
from regal.synth.training import training_graph

__all__ = ["FAMILIES", "SYNTH_VERSION", "REGAL_SYNTHETIC", "RECIPES", "SplitRecipe", "generate",
           "min_ops", "graph_at", "materialize", "recipe_named", "custom_recipe",
           "recipe_to_dict"]

SYNTH_VERSION = 1

FAMILIES = ("random", "cnn", "inception", "transformer")
_FAMILY_ALIASES = {"mixed": FAMILIES}

# The REGAL paper's split sizes; seeds and op range are this project's choice.
REGAL_SYNTHETIC = {"train": 10000, "valid": 1000, "test": 1000}
_REGAL_SEEDS = {"train": 20190507, "valid": 20190508, "test": 20190509}
_REGAL_OPS = (50, 200)
# ratio (training graph ops / forward ops) used for the first guess of the forward size
_TRAINING_RATIO_GUESS = 2.3


# ---------------------------------------------------------------------------
# one entry point


_BUILDERS = {
    "random": random_dag, "cnn": layered_cnn, "inception": inception_like,
    "transformer": transformer_like,
}
_MIN_FORWARD = {"random": 2, "cnn": _CNN_PROLOGUE + _CNN_HEAD,
                "inception": _INC_PROLOGUE + _INC_HEAD, "transformer": _TF_PROLOGUE + _TF_HEAD}


def _families(family) -> tuple[str, ...]:
    names = (family,) if isinstance(family, str) else tuple(family)
    out: list[str] = []
    for f in names:
        if f in _FAMILY_ALIASES:
            out.extend(_FAMILY_ALIASES[f])
        elif f in _BUILDERS:
            out.append(f)
        else:
            raise ValueError(f"family {f!r} is unknown; choose from "
                             f"{', '.join(FAMILIES + tuple(_FAMILY_ALIASES))}")
    if not out:
        raise ValueError("families must name at least one family")
    return tuple(dict.fromkeys(out))


def min_ops(family, training: bool = False) -> int:
    """The smallest op count `generate` accepts for `family` (a name, 'mixed' or a list)."""
    fams = _families(family)
    need = max(_MIN_FORWARD[f] for f in fams)
    return 3 * need if training else need


def generate(family: str, num_ops: int, seed, *, training: bool = False) -> ComputationGraph:
    """One graph of `family` ('random', 'cnn', 'inception', 'transformer' or 'mixed').

    Op counts are exact for inference graphs; with `training=True` the forward size is chosen
    so that forward + backward + updates lands near `num_ops` (within a few percent).
    """
    fams = _families(family)
    _check_num_ops(num_ops, min_ops(fams, training))
    rng = _rng(seed)
    fam = fams[int(rng.integers(len(fams)))] if len(fams) > 1 else fams[0]
    build = _BUILDERS[fam]
    sub_seed = int(rng.integers(2**63))
    if not training:
        return build(int(num_ops), sub_seed)
    lo = _MIN_FORWARD[fam]
    fwd = max(lo, int(round(num_ops / _TRAINING_RATIO_GUESS)))
    graph = training_graph(build(fwd, sub_seed))
    for _ in range(3):  # secant-free correction: the ratio barely moves with size
        if abs(graph.num_nodes - num_ops) <= 0.03 * num_ops:
            break
        fwd2 = max(lo, int(round(fwd * num_ops / graph.num_nodes)))
        if fwd2 == fwd:
            break
        fwd = fwd2
        graph = training_graph(build(fwd, sub_seed))
    return graph


# ---------------------------------------------------------------------------
# splits as recipes


@dataclass(frozen=True)
class SplitRecipe:
    """How to regenerate a split: graph `i` depends only on (`seed`, `i`) and the parameters."""

    name: str
    count: int
    min_ops: int
    max_ops: int
    seed: int
    families: tuple[str, ...] = ("random",)
    training: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or os.sep in self.name:
            raise ValueError(f"name must be a non-empty file-name prefix, got {self.name!r}")
        for field in ("count", "min_ops", "max_ops", "seed"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"{field} must be an integer, got {value!r}")
        if self.count < 1:
            raise ValueError(f"count must be at least 1, got {self.count}")
        if self.seed < 0:
            raise ValueError(f"seed must be non-negative, got {self.seed}")
        families = _families(self.families)
        object.__setattr__(self, "families", families)
        object.__setattr__(self, "training", bool(self.training))
        need = min_ops(families, self.training)
        if self.min_ops < need:
            raise ValueError(f"min_ops must be at least {need} for families "
                             f"{', '.join(families)}{' (training)' if self.training else ''}, "
                             f"got {self.min_ops}")
        if self.min_ops > self.max_ops:
            raise ValueError(f"min_ops ({self.min_ops}) must not exceed max_ops ({self.max_ops})")
        if self.max_ops > _MAX_OPS:
            raise ValueError(f"max_ops must be at most {_MAX_OPS}, got {self.max_ops}")


RECIPES = {
    name: SplitRecipe(name=name, count=count, min_ops=_REGAL_OPS[0], max_ops=_REGAL_OPS[1],
                      seed=_REGAL_SEEDS[name], families=("random",))
    for name, count in REGAL_SYNTHETIC.items()
}


def recipe_named(name: str, count: int | None = None) -> SplitRecipe:
    """A REGAL-like split ('train', 'valid', 'test'), optionally only its first `count`."""
    if name not in RECIPES:
        raise ValueError(f"recipe {name!r} is unknown; choose from {', '.join(RECIPES)}")
    recipe = RECIPES[name]
    if count is not None:
        if count > recipe.count:
            raise ValueError(f"count must be at most {recipe.count} for recipe {name!r}, "
                             f"got {count}")
        recipe = dataclasses.replace(recipe, count=count)
    return recipe


def custom_recipe(count: int, min_ops: int, max_ops: int, seed: int, family: str = "random",
                  training: bool = False, name: str = "synth") -> SplitRecipe:
    return SplitRecipe(name=name, count=count, min_ops=min_ops, max_ops=max_ops, seed=seed,
                       families=_families(family), training=training)


def _draws(recipe: SplitRecipe, index: int):
    """(op count, family, generator) of graph `index`: its generator after those two draws."""
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) \
            or not 0 <= index < recipe.count:
        raise ValueError(f"index must be in 0..{recipe.count - 1}, got {index!r}")
    # the same stream SeedSequence(seed).spawn(count)[index] would give, without the others
    seq = np.random.SeedSequence(recipe.seed, spawn_key=(int(index),))
    rng = np.random.default_rng(seq)
    num_ops = int(rng.integers(recipe.min_ops, recipe.max_ops + 1))
    fams = recipe.families
    return num_ops, fams[int(rng.integers(len(fams)))], rng


def graph_at(recipe: SplitRecipe, index: int) -> ComputationGraph:
    """Graph `index` of `recipe`, rebuilt on its own (no other graph of the split is needed)."""
    num_ops, fam, rng = _draws(recipe, index)
    return generate(fam, num_ops, int(rng.integers(2**63)), training=recipe.training)


def family_at(recipe: SplitRecipe, index: int) -> str:
    """The family graph `index` of `recipe` is drawn from (without building it)."""
    return _draws(recipe, index)[1]


def recipe_to_dict(recipe: SplitRecipe) -> dict:
    d = dataclasses.asdict(recipe)
    d["families"] = list(recipe.families)
    return d


def _regenerate_command(recipe: SplitRecipe) -> str:
    """The shortest way to rebuild `recipe`'s folder, for recipe.json."""
    if recipe.name in RECIPES and \
            dataclasses.replace(RECIPES[recipe.name], count=recipe.count) == recipe:
        extra = "" if recipe.count == RECIPES[recipe.name].count else f" --count {recipe.count}"
        return f"regal data synth --recipe {recipe.name}{extra} --out DIR"
    if len(recipe.families) == 1:
        family = recipe.families[0]
    elif set(recipe.families) == set(FAMILIES):
        family = "mixed"
    else:
        family = None
    if recipe.name != "synth" or family is None or recipe.families != _families(family):
        return "python -c: regal.synth.materialize(regal.synth.SplitRecipe(**recipe), DIR)"
    return (f"regal data synth --count {recipe.count} --min-ops {recipe.min_ops} "
            f"--max-ops {recipe.max_ops} --seed {recipe.seed} --family {family}"
            f"{' --training' if recipe.training else ''} --out DIR")


def materialize(recipe: SplitRecipe, out_dir, progress: bool = True) -> list[Path]:
    """Writes `{name}_{index:05d}.npz` for every graph of `recipe` into `out_dir`, plus
    `recipe.json`. Files already there are kept, so a killed run resumes where it stopped.
    Refuses a folder whose recipe.json describes a different recipe (other than its count).
    """
    from tqdm import tqdm

    from regal.files import write_json
    from regal.io import save_graph

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out must be a folder, but {out} is a file")
    meta_path = out / "recipe.json"
    mine = recipe_to_dict(recipe)
    if meta_path.exists():
        try:
            theirs = json.loads(meta_path.read_text()).get("recipe", {})
        except (json.JSONDecodeError, AttributeError):
            theirs = None
        same = isinstance(theirs, dict) and {k: v for k, v in theirs.items() if k != "count"} == \
            {k: v for k, v in mine.items() if k != "count"}
        if not same:
            raise ValueError(f"out folder {out} holds a different recipe (see {meta_path}); "
                             f"choose another folder")
    out.mkdir(parents=True, exist_ok=True)
    write_json(meta_path, {
        "generator": f"regal.synth v{SYNTH_VERSION}",
        "recipe": mine,
        "files": f"{recipe.name}_{{index:05d}}.npz, index 0..{recipe.count - 1}",
        "regenerate": _regenerate_command(recipe),
        "one_graph": "regal.synth.graph_at(regal.synth.SplitRecipe(**recipe), index)",
    }, indent=2, sort_keys=True)
    paths = []
    for i in tqdm(range(recipe.count), desc=recipe.name, unit="graph",
                  disable=not progress):
        path = out / f"{recipe.name}_{i:05d}.npz"
        if not path.exists():
            save_graph(graph_at(recipe, i), path)
        paths.append(path)
    return paths
