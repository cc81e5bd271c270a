"""Procedural computation graphs: REGAL-like random DAGs, network-like families, augmentation.

Why: the policy trains on many graphs, and the REGAL paper's synthetic set (10,000 train /
1,000 validation / 1,000 test random graphs, tensor sizes and op costs around 50) is a recipe,
not something to commit. Every generator here is a pure function of a seed, so a split is a
`SplitRecipe` and any single graph of it is rebuilt with `graph_at(recipe, index)`.

Units: random DAGs use REGAL's abstract scale (sizes/costs ~50). The network-like families
use bytes (float32 tensors from shapes) and microseconds (a roofline-style estimate), like the
graphs imported from TensorFlow. Every size, memory and cost is a non-negative integer, as in
a CostGraphDef.
"""

from regal.synth.families import inception_like, layered_cnn, random_dag, transformer_like
from regal.synth.recipes import (FAMILIES, RECIPES, REGAL_SYNTHETIC, SYNTH_VERSION, SplitRecipe,
                                 custom_recipe, family_at, generate, graph_at, materialize,
                                 min_ops, recipe_named, recipe_to_dict)
from regal.synth.training import augment, training_graph

__all__ = [
    "FAMILIES", "SYNTH_VERSION", "REGAL_SYNTHETIC", "RECIPES", "SplitRecipe",
    "random_dag", "layered_cnn", "inception_like", "transformer_like", "training_graph",
    "augment", "generate", "min_ops", "graph_at", "family_at", "materialize", "recipe_named",
    "custom_recipe", "recipe_to_dict",
]
