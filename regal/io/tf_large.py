"""Large language models as training steps: GPT-2 small / medium / large shapes and a
BERT-large-like encoder, the models people place because one device cannot hold them.

Why: the committed real set (`regal.io.tf_models`) holds small models; a placement optimizer
earns its keep when the training step does not fit on one device. These are built from their
shapes alone with `tf.keras` layers (no weights are downloaded or even allocated: the importer
builds them inside a `tf.compat.v1.Graph`, so a variable is a node, not memory), compiled with
the loss they train with (next-token or masked-token cross-entropy), and imported as one
training step (forward, backward, Adam) by `regal.io.tensorflow.import_model`.

The shapes follow the published configurations (GPT-2: Radford et al. 2019; BERT-large:
Devlin et al. 2019): pre-layer-norm GPT-2 blocks with GELU, learned positions, the output
projection tied to the token embedding; post-layer-norm BERT blocks and a masked-LM head over
every position (tied as well). Dropout 0.1 on attention weights and residual branches, as in
both papers' training. `build_large_set` writes `{model}_train_b{batch}.npz`.
"""

from __future__ import annotations

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import regal.tfenv  # noqa: E402,F401  (OR-Tools before TensorFlow: see regal/tfenv.py)

import resource  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, NamedTuple, Sequence  # noqa: E402

with regal.tfenv.quiet_native_logs():  # a `regal` command's errors stay one line
    import tensorflow as tf  # noqa: E402

__all__ = ["LargeShape", "LARGE_SHAPES", "LARGE_MODELS", "LARGE_BATCH_SIZES", "large_model",
           "build_large_set", "large_graph_name",
           "write_large_readme"]

LARGE_BATCH_SIZES = (1, 4)


class LargeShape(NamedTuple):
    """A transformer's published shape."""
    layers: int
    d_model: int
    heads: int
    seq_len: int
    vocab: int
    causal: bool       # GPT-style decoder (pre-norm) or BERT-style encoder (post-norm)
    d_ff: int = 0      # 0: 4 x d_model

    @property
    def ff(self) -> int:
        return self.d_ff or 4 * self.d_model


LARGE_SHAPES: dict[str, LargeShape] = {
    "gpt2_small": LargeShape(12, 768, 12, 1024, 50257, causal=True),
    "gpt2_medium": LargeShape(24, 1024, 16, 1024, 50257, causal=True),
    "gpt2_large": LargeShape(36, 1280, 20, 1024, 50257, causal=True),
    "bert_large": LargeShape(24, 1024, 16, 512, 30522, causal=False),
}

DROPOUT = 0.1


class TiedOutput(tf.keras.layers.Layer):
    """Logits from the token embedding's own matrix (GPT-2 and BERT tie them): x @ E^T."""

    def __init__(self, embedding: tf.keras.layers.Embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding

    def call(self, x):
        # a 2-D matmul: a batched one would broadcast, and its gradient's shapes are dynamic
        flat = tf.reshape(x, [-1, x.shape[-1]])
        logits = tf.matmul(flat, self.embedding.embeddings, transpose_b=True)
        return tf.reshape(logits, tf.concat([tf.shape(x)[:-1], [-1]], 0))


class AddPositions(tf.keras.layers.Layer):
    """Adds a learned position embedding. A layer of its own: an `Embedding` called on
    `tf.range` sits outside the functional graph, so Keras would neither train nor count it."""

    def __init__(self, seq_len: int, d_model: int, **kwargs):
        super().__init__(**kwargs)
        self.seq_len, self.d_model = seq_len, d_model

    def build(self, input_shape):
        self.embeddings = self.add_weight("embeddings", (self.seq_len, self.d_model),
                                          initializer="uniform")

    def call(self, x):
        return x + self.embeddings[tf.newaxis]


def _block(x, shape: LargeShape, index: int):
    layers = tf.keras.layers
    name = f"block{index}"
    attention = layers.MultiHeadAttention(shape.heads, shape.d_model // shape.heads,
                                          dropout=DROPOUT, name=f"{name}_attention")
    if shape.causal:  # GPT-2: x + f(norm(x))
        h = layers.LayerNormalization(epsilon=1e-5, name=f"{name}_norm1")(x)
        h = attention(h, h, use_causal_mask=True)
        x = x + layers.Dropout(DROPOUT, name=f"{name}_drop1")(h)
        h = layers.LayerNormalization(epsilon=1e-5, name=f"{name}_norm2")(x)
        h = layers.Dense(shape.ff, activation="gelu", name=f"{name}_ff1")(h)
        h = layers.Dense(shape.d_model, name=f"{name}_ff2")(h)
        return x + layers.Dropout(DROPOUT, name=f"{name}_drop2")(h)
    # BERT: norm(x + f(x))
    h = attention(x, x)
    x = layers.LayerNormalization(epsilon=1e-12, name=f"{name}_norm1")(
        x + layers.Dropout(DROPOUT, name=f"{name}_drop1")(h))
    h = layers.Dense(shape.ff, activation="gelu", name=f"{name}_ff1")(x)
    h = layers.Dense(shape.d_model, name=f"{name}_ff2")(h)
    return layers.LayerNormalization(epsilon=1e-12, name=f"{name}_norm2")(
        x + layers.Dropout(DROPOUT, name=f"{name}_drop2")(h))


def large_model(name: str, shape: LargeShape | None = None) -> Callable[[], tf.keras.Model]:
    """A zero-argument builder of the named model (or of `shape`, named `name`), compiled
    with its training loss."""
    if shape is None:
        if name not in LARGE_SHAPES:
            raise ValueError(f"unknown large model {name!r}; known: {', '.join(LARGE_SHAPES)}")
        shape = LARGE_SHAPES[name]

    def build() -> tf.keras.Model:
        layers = tf.keras.layers
        tokens = tf.keras.Input((shape.seq_len,), dtype="int32", name="tokens")
        embedding = layers.Embedding(shape.vocab, shape.d_model, name="token_embedding")
        x = AddPositions(shape.seq_len, shape.d_model, name="position_embedding")(
            embedding(tokens))
        x = layers.Dropout(DROPOUT, name="embedding_drop")(x)
        if not shape.causal:
            x = layers.LayerNormalization(epsilon=1e-12, name="embedding_norm")(x)
        for i in range(shape.layers):
            x = _block(x, shape, i)
        if shape.causal:
            x = layers.LayerNormalization(epsilon=1e-5, name="final_norm")(x)
        else:  # BERT's masked-LM transform before the tied output
            x = layers.Dense(shape.d_model, activation="gelu", name="mlm_transform")(x)
            x = layers.LayerNormalization(epsilon=1e-12, name="mlm_norm")(x)
        logits = TiedOutput(embedding, name="lm_head")(x)
        model = tf.keras.Model(tokens, logits, name=name)
        model.compile(optimizer="adam",
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    build.__name__ = name
    return build


LARGE_MODELS: dict[str, Callable[[], tf.keras.Model]] = {m: large_model(m) for m in LARGE_SHAPES}


def large_graph_name(model: str, batch_size: int, microbatches: int = 1) -> str:
    return f"{model}_train_b{batch_size}" + (f"_k{microbatches}" if microbatches > 1 else "") \
        + ".npz"


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _import_one(model: str, shape: LargeShape, batch: int, microbatches: int,
                path: str) -> dict:
    """Imports one training step and writes it (in a child process: its peak RSS is this
    import's alone)."""
    from regal.io import save_graph
    from regal.io.tensorflow import import_model

    start = time.perf_counter()
    options = {} if microbatches == 1 else {"microbatches": microbatches}
    graph = import_model(large_model(model, shape), batch_size=batch, training=True, **options)
    imported = time.perf_counter() - start
    save_graph(graph, path)
    return {"file": Path(path).name, "model": model, "batch": batch,
            "microbatches": microbatches, "ops": graph.num_nodes, "import_s": imported,
            "peak_rss": _peak_rss_bytes()}


def build_large_set(out_dir: str | os.PathLike, models: Sequence[str] | None = None,
                    batch_sizes: Sequence[int] = LARGE_BATCH_SIZES,
                    microbatches: Sequence[int] = (1,), progress: bool = True,
                    shapes: dict[str, LargeShape] | None = None) -> list[dict]:
    """Imports each model's training step at each batch size and micro-batch count, each in
    a fresh process; skips files already there (resumable). Returns the import records of
    `OUT/imports.jsonl` for the files asked for (import seconds, peak RSS of the import).
    `shapes`: other models than `LARGE_SHAPES` (name -> shape), e.g. a small one in a test."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from tqdm import tqdm

    from regal.files import JsonLinesWriter, read_json_lines

    shapes = LARGE_SHAPES if shapes is None else shapes
    models = list(shapes) if not models else list(models)
    unknown = [m for m in models if m not in shapes]
    if unknown:
        raise ValueError(f"unknown large model {unknown[0]!r}; known: {', '.join(shapes)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "imports.jsonl"
    jobs = [(m, b, k) for m in models for b in batch_sizes for k in microbatches]
    bar = tqdm(jobs, desc="large graphs", unit="graph", disable=not progress)
    context = multiprocessing.get_context("spawn")
    with JsonLinesWriter(log, f"{log} is being written by another run") as writer:
        known = {r["file"]: r for r in read_json_lines(log)}
        for model, batch, k in bar:
            path = out / large_graph_name(model, batch, k)
            bar.set_postfix_str(path.name)
            if path.exists() and path.name in known:
                continue
            with ProcessPoolExecutor(1, mp_context=context) as pool:
                record = pool.submit(_import_one, model, shapes[model], batch, k, str(path)).result()
            writer.write(record)
            known[path.name] = record
            bar.write(f"{path.name}: {record['ops']:,} ops, {record['import_s']:.1f} s, "
                      f"peak RSS {record['peak_rss'] / 2**30:.2f} GiB")
    return [known[large_graph_name(m, b, k)] for m, b, k in jobs
            if large_graph_name(m, b, k) in known]


def write_large_readme(out_dir: str | os.PathLike,
                       shapes: dict[str, LargeShape] | None = None) -> str:
    """`OUT/README.md`: one row per graph file, with its import's time and peak RSS."""
    from regal.files import read_json_lines, write_text
    from regal.graph import summarize
    from regal.io import load_graph
    from regal.optimizers import one_device
    from regal.problem import Problem
    from regal.sim import DeviceSpec
    from regal.units import format_bytes

    out = Path(out_dir)
    imports = {r["file"]: r for r in read_json_lines(out / "imports.jsonl")}
    rows = []
    for path in sorted(out.glob("*.npz")):
        graph = load_graph(path)
        s = summarize(graph)
        one = one_device(Problem(graph, DeviceSpec(1), "peak_memory"))
        r = imports.get(path.name, {})
        rows.append(f"| `{path.name}` | {s['ops']:,} | {s['tensors']:,} | "
                    f"{format_bytes(s['persistent bytes'])} | {format_bytes(max(one.peak))} | "
                    f"{one.makespan / 1000:,.1f} | "
                    f"{path.stat().st_size / 2**10:,.0f} | "
                    + (f"{r['import_s']:.1f} | {r['peak_rss'] / 2**30:.2f} |" if r else " | |"))
    shapes = "\n".join(f"| `{name}` | {v.layers} | {v.d_model} | {v.heads} | {v.ff} | "
                       f"{v.seq_len} | {v.vocab:,} | {'GPT-2 (causal, pre-norm)' if v.causal else 'BERT (bidirectional, post-norm)'} |"
                       for name, v in (LARGE_SHAPES if shapes is None else shapes).items())
    text = _README.format(rows="\n".join(rows), shapes=shapes)
    write_text(out / "README.md", text)
    return text


_README = """# Large models: training steps too big for one device

Built by `regal data large --out data/large` (from `regal.io.tf_large`; statically, no
network and no weights: each model is built inside a `tf.compat.v1.Graph`, where a variable is
a node, so the import never holds the weights once, let alone twice). Each file is one
training step: forward, the model's own loss (token cross-entropy), gradients and Adam's
update of every weight. Each import runs in a fresh process; its time and peak resident
memory are in `imports.jsonl` and below. `_kK` files hold K micro-batches of the batch
(`--microbatches K`): K forward and backward passes whose gradients are summed into one
update, so placement and order together can pipeline them.

| model | layers | d_model | heads | feed-forward | sequence | vocabulary | kind |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |
{shapes}

Dropout 0.1 on attention weights and residual branches; the output projection is tied to the
token embedding (one matrix). "one-device peak" and "one-device step" are the simulator's, for
the whole graph on one device in a topological order (the yardstick `regal optimize`
prints). That order is breadth first, so on a `_kK` graph it runs the K micro-batches side by
side and its peak holds all of them, about what the whole batch in one pass holds; an order
that finishes one micro-batch before the next starts needs far less.

| graph file | ops | tensors | persistent | one-device peak | one-device step ms | file KiB | import s | import peak RSS GiB |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
{rows}
"""
