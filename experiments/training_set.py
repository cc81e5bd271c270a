"""The policy's training graphs in one folder, rebuilt the same on any machine.

    python experiments/training_set.py --out graphs/train_mix

Three kinds, so that training sees graphs like the ones users bring:
- `synth_*`: the REGAL-like synthetic "train" split (random DAGs, 50-200 ops), the first
  `--synth` graphs;
- `net_*`: network-like synthetic graphs (CNN, inception and transformer families; inference
  graphs of 150-800 ops and training steps of 300-1,500 ops), seeded apart from every split;
- `real_*`: links to the `data/real` graphs of the training families (`TRAIN_FAMILIES`), at most
  `--real-max-ops` ops. The other families (`HELD_OUT_FAMILIES`) are never trained on: the
  transfer experiment's real test uses only them.

Graphs already in the folder are kept (a rerun only adds what is missing).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from regal import synth  # noqa: E402
from regal.arguments import check_output, positive_int  # noqa: E402
from regal.io import load_graph, save_graph  # noqa: E402
from regal.user_errors import UserError, report_user_errors  # noqa: E402

# data/real families; the held-out ones are the real-graph test set of experiments/transfer.py
TRAIN_FAMILIES = ("densenet121", "efficientnetb0", "mobilenetv2", "nasnetmobile", "vgg16",
                  "transformer_decoder")
HELD_OUT_FAMILIES = ("resnet50", "inceptionv3", "xception", "transformer_encoder")
REAL_MAX_OPS = 3300  # the largest graphs of the training set (real: 3,242 ops; synthetic: 1,500)
NET_SEED = 20261125  # apart from the REGAL split seeds
NET_FAMILIES = ("cnn", "inception", "transformer")


def family_of(name: str) -> str:
    """'mobilenetv2_train_b1.npz' -> 'mobilenetv2'."""
    stem = Path(name).stem
    for family in TRAIN_FAMILIES + HELD_OUT_FAMILIES:
        if stem.startswith(family + "_"):
            return family
    return stem.split("_")[0]


def build(out: Path, synth_count: int, net_count: int, real_max_ops: int,
          progress: bool = False) -> dict:
    from tqdm import tqdm

    out.mkdir(parents=True, exist_ok=True)
    counts = {"synth": 0, "net": 0, "real": 0}
    train = synth.recipe_named("train", synth_count)
    recipes = [synth.custom_recipe(net_count, 150, 800, NET_SEED, family=NET_FAMILIES, name="netinf"),
               synth.custom_recipe(max(1, net_count // 2), 300, 1500, NET_SEED + 1,
                                   family=NET_FAMILIES, training=True, name="nettrain")]
    bar = tqdm(total=synth_count + sum(recipe.count for recipe in recipes), desc="graphs",
               unit="graph", disable=None if progress else True)
    with bar:
        for i in range(synth_count):
            path = out / f"synth_{i:05d}.npz"
            if not path.exists():
                save_graph(synth.graph_at(train, i), path)
            counts["synth"] += 1
            bar.update()
        for recipe in recipes:
            for i in range(recipe.count):
                path = out / f"net_{recipe.name}_{i:04d}.npz"
                if not path.exists():
                    save_graph(synth.graph_at(recipe, i), path)
                counts["net"] += 1
                bar.update()
    for source in sorted((REPO / "data" / "real").glob("*.npz")):
        if family_of(source.name) not in TRAIN_FAMILIES:
            continue
        if load_graph(source).num_nodes > real_max_ops:
            continue
        target = out / f"real_{source.name}"
        if not target.exists():
            try:
                target.symlink_to(source.resolve())
            except OSError:
                shutil.copy(source, target)
        counts["real"] += 1
    return counts


# the files `build` writes: a folder that holds others is another set's
OWN_FILE = re.compile(r"^(synth_\d{5}|net_(netinf|nettrain)_\d{4}|real_.+)\.npz$")


def check_own_folder(out: Path) -> None:
    """Refuses an --out that holds another graph set (a `regal data synth` folder, with its
    recipe.json, or graph files this script does not write): filling it would mix the
    training graphs with another split's."""
    if not out.is_dir():
        return
    foreign = sorted(p.name for p in out.glob("*.npz") if not OWN_FILE.match(p.name))
    if (out / "recipe.json").exists() or foreign:
        what = "a recipe.json" if (out / "recipe.json").exists() else f"{foreign[0]}"
        raise UserError(f"--out {out}: holds another graph set ({what}); give an empty folder "
                        "or one this script filled")


def main(argv=None) -> int:
    """The command: a user's error is one line on stderr and exit code 2."""
    return report_user_errors(Path(__file__).name, lambda: _main(argv))


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="folder to fill")
    parser.add_argument("--synth", type=positive_int, default=200,
                        help="REGAL-like train graphs")
    parser.add_argument("--net", type=positive_int, default=40,
                        help="network-like inference graphs (half as many training steps)")
    parser.add_argument("--real-max-ops", type=positive_int, default=REAL_MAX_OPS,
                        help="largest data/real graph to include")
    args = parser.parse_args(argv)
    check_output("--out", args.out, folder=True)
    check_own_folder(args.out)
    counts = build(args.out, args.synth, args.net, args.real_max_ops, progress=True)
    print(f"{args.out}: {counts['synth']} synthetic train, {counts['net']} network-like, "
          f"{counts['real']} real graphs of {', '.join(TRAIN_FAMILIES)} "
          f"(held out: {', '.join(HELD_OUT_FAMILIES)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
