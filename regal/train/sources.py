"""Graph sources: a folder of graph files, or a synth recipe ("train", "valid:64")."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from regal.graph import ComputationGraph


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
