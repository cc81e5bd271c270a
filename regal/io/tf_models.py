"""The committed real graph set: Keras applications and two small transformers.

Every model is a zero-argument builder, so `regal.io.tensorflow.import_model` builds it
directly inside its own graph (weights=None: no download, works offline). `build_real_set`
imports each model as an inference and a training step at each batch size and writes
`{model}_{infer|train}_b{batch}.npz`; `write_real_readme` tabulates what is there.
"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import regal.tfenv  # noqa: E402,F401  (OR-Tools before TensorFlow: see regal/tfenv.py)

import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, Sequence  # noqa: E402

with regal.tfenv.quiet_native_logs():  # a `regal` command's errors stay one line
    import tensorflow as tf  # noqa: E402

__all__ = ["REAL_MODELS", "BATCH_SIZES", "README_TITLE", "real_graph_name", "build_real_set",
           "write_real_readme", "transformer_encoder", "transformer_decoder"]

BATCH_SIZES = (1, 32)

# transformer sizes: small enough to build fast, large enough to look like the real thing
SEQ_LEN = 128
VOCAB = 8000
D_MODEL = 256
HEADS = 4
D_FF = 1024
LAYERS = 4


def _application(name: str, size: int) -> Callable[[], tf.keras.Model]:
    def build() -> tf.keras.Model:
        ctor = getattr(tf.keras.applications, name)
        return ctor(weights=None, input_shape=(size, size, 3))
    build.__name__ = name
    return build


def _block(x, *, causal: bool, index: int):
    """One post-norm transformer block: self-attention then a feed-forward network."""
    layers = tf.keras.layers
    attn = layers.MultiHeadAttention(HEADS, D_MODEL // HEADS, name=f"block{index}_attention")
    h = attn(x, x, use_causal_mask=causal)
    x = layers.LayerNormalization(epsilon=1e-6, name=f"block{index}_norm1")(x + h)
    h = layers.Dense(D_FF, activation="gelu", name=f"block{index}_ff1")(x)
    h = layers.Dense(D_MODEL, name=f"block{index}_ff2")(h)
    return layers.LayerNormalization(epsilon=1e-6, name=f"block{index}_norm2")(x + h)


def _embed(tokens):
    layers = tf.keras.layers
    x = layers.Embedding(VOCAB, D_MODEL, name="token_embedding")(tokens)
    positions = layers.Embedding(SEQ_LEN, D_MODEL, name="position_embedding")(
        tf.range(SEQ_LEN)[tf.newaxis, :])
    return x + positions


def transformer_encoder() -> tf.keras.Model:
    """BERT-like: bidirectional self-attention, a pooled classification head."""
    tokens = tf.keras.Input((SEQ_LEN,), dtype="int32", name="tokens")
    x = _embed(tokens)
    for i in range(LAYERS):
        x = _block(x, causal=False, index=i)
    pooled = tf.keras.layers.Dense(D_MODEL, activation="tanh", name="pooler")(x[:, 0])
    logits = tf.keras.layers.Dense(2, name="classifier")(pooled)
    return tf.keras.Model(tokens, logits, name="transformer_encoder")


def transformer_decoder() -> tf.keras.Model:
    """GPT-like: causal self-attention, next-token logits over the vocabulary."""
    tokens = tf.keras.Input((SEQ_LEN,), dtype="int32", name="tokens")
    x = _embed(tokens)
    for i in range(LAYERS):
        x = _block(x, causal=True, index=i)
    logits = tf.keras.layers.Dense(VOCAB, name="lm_head")(x)
    return tf.keras.Model(tokens, logits, name="transformer_decoder")


# name -> builder; image models at 224x224 except where the architecture's default differs
REAL_MODELS: dict[str, Callable[[], tf.keras.Model]] = {
    "mobilenetv2": _application("MobileNetV2", 224),
    "resnet50": _application("ResNet50", 224),
    "vgg16": _application("VGG16", 224),
    "inceptionv3": _application("InceptionV3", 299),
    "densenet121": _application("DenseNet121", 224),
    "efficientnetb0": _application("EfficientNetB0", 224),
    "xception": _application("Xception", 299),
    "nasnetmobile": _application("NASNetMobile", 224),
    "transformer_encoder": transformer_encoder,
    "transformer_decoder": transformer_decoder,
}


def real_graph_name(model: str, training: bool, batch_size: int) -> str:
    return f"{model}_{'train' if training else 'infer'}_b{batch_size}.npz"


def build_real_set(out_dir: str | os.PathLike, models: Sequence[str] | None = None,
                   batch_sizes: Sequence[int] = BATCH_SIZES, progress: bool = True) -> list[Path]:
    """Imports every (model, mode, batch) statically; skips files already there (resumable)."""
    from tqdm import tqdm

    from regal.io import save_graph
    from regal.io.tensorflow import import_model

    models = list(REAL_MODELS) if not models else list(models)
    unknown = [m for m in models if m not in REAL_MODELS]
    if unknown:
        raise ValueError(f"unknown real model {unknown[0]!r}; known: {', '.join(REAL_MODELS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(m, t, b) for m in models for t in (False, True) for b in batch_sizes]
    written = []
    bar = tqdm(jobs, desc="real graphs", unit="graph", disable=not progress)
    for model, training, batch in bar:
        path = out / real_graph_name(model, training, batch)
        bar.set_postfix_str(path.name)
        if not path.exists():
            start = time.perf_counter()
            graph = import_model(REAL_MODELS[model], batch_size=batch, training=training)
            save_graph(graph, path)
            tf.keras.backend.clear_session()
            bar.write(f"{path.name}: {graph.num_nodes} ops, "
                      f"{time.perf_counter() - start:.1f} s")
        written.append(path)
    return written


def write_real_readme(out_dir: str | os.PathLike, readme: str | os.PathLike) -> str:
    """Writes the data README with one table row per graph file in `out_dir`."""
    from regal.graph import summarize
    from regal.io import load_graph

    out = Path(out_dir)
    rows = []
    total_size = 0
    for path in sorted(out.glob("*.npz")):
        graph = load_graph(path)
        s = summarize(graph)
        total_size += path.stat().st_size
        aliased = int((graph.tensor_alias >= 0).sum())
        groups = graph.groups()
        grouped = sum(len(m) for m in groups.values())
        rows.append(f"| `{path.name}` | {s['ops']:,} | {s['tensors']:,} | {s['total bytes']:,} | "
                    f"{aliased:,} | {s['persistent bytes']:,} | "
                    f"{int(graph.temporary_memory.sum()):,} | {s['depth']:,} | "
                    f"{len(groups):,} ({grouped:,} ops) |")
    text = _README.format(rows="\n".join(rows), count=len(rows),
                          size=f"{total_size / 2**20:.1f} MiB", seq=SEQ_LEN, vocab=VOCAB,
                          d=D_MODEL, heads=HEADS, ff=D_FF, layers=LAYERS)
    from regal.files import write_text
    write_text(readme, text)
    return text


README_TITLE = "# Graph sets"  # the first line of the table's file (`regal data real`)
_README = README_TITLE + """

## `real/`: real TensorFlow graphs ({count} files, {size})

Built by `regal data real --out data/real` (statically, from `regal.io.tf_models`; about
8 minutes on 2 CPU cores, no network: every model is built with `weights=None`). The
command skips files that exist, so delete a file to rebuild it. Each file is the project's
`.npz` format; inspect one with `regal data info data/real/resnet50_infer_b1.npz`.

Models: eight `tf.keras.applications` (MobileNetV2, ResNet50, VGG16, DenseNet121,
EfficientNetB0 and NASNetMobile at 224x224; InceptionV3 and Xception at 299x299, with the
1000-class top) and two transformers written with `tf.keras` layers
({layers} blocks, d_model {d}, {heads} heads, feed-forward {ff}, sequence {seq}, vocabulary {vocab}):
`transformer_encoder` (BERT-like, bidirectional, pooled 2-class head) and
`transformer_decoder` (GPT-like, causal self-attention, next-token logits).

Each model is imported as an inference step (`infer`) and a training step (`train`:
forward, mean-square loss on the outputs, gradients, Adam update and batch-norm
moving-average updates) at batch sizes 1 and 32 (`_b1`, `_b32`).

How the numbers are made (see `regal/io/tensorflow/`): tensor bytes are static shape x
dtype size; a variable's bytes are the persistent memory of the first op that reads it
(each variable once; Adam's slots belong to the update op); compute cost is a roofline
estimate (10 TFLOP/s, 500 GB/s, 1 µs per launch). Element-wise ops that TensorFlow runs
in place (its input's last consumer) alias that input instead of allocating; each
`Conv2DBackpropFilter` / `Conv2DBackpropInput` holds the im2col scratch buffer
TensorFlow's CPU kernel allocates (`temporary_memory`, up to about 30 MB each, for the
filter gradient independent of the batch); both corrections were checked against
measured runs (`experiments/results/sim_vs_measured_cpu.md`).
"tensor bytes" sums every op output, including outputs that alias their input (which the
simulator does not allocate twice); "aliased" counts those outputs and "scratch bytes"
sums the ops' temporary memory. "colocation groups" counts the groups of two or more ops
that TensorFlow's placer keeps on one device (a variable with every op that reads or
updates it, `_class` colocation), and the ops in them; every placement respects them.

| graph file | ops | tensors | tensor bytes | aliased | persistent bytes | scratch bytes | depth | colocation groups |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
{rows}

Rebuild everything: `rm data/real/*.npz && regal data real --out data/real`
(or a subset: `regal data real --out data/real --models resnet50 transformer_decoder`).
"""
