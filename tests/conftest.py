"""Test-session set-up shared by every test file."""

import regal.tfenv  # noqa: F401  (first: Keras 2 for spektral; OR-Tools before TensorFlow)

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def experiment(name: str):
    """The script experiments/NAME.py loaded as a module (its main() not run)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "experiments" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_synthetic_graph(folder, min_ops: int, max_ops: int, seed: int) -> str:
    """The path of one small synthetic graph file written into `folder`."""
    from regal import synth

    (path,) = synth.materialize(synth.custom_recipe(count=1, min_ops=min_ops, max_ops=max_ops,
                                                    seed=seed), folder, progress=False)
    return str(path)


def brkga_and_local_search_run(tmp_path, dataset: str, min_ops: int, max_ops: int, graph_seed: int,
                               seeds: int, budget: int):
    """One small synthetic graph in TMP/graphs and a harness run of brkga and local-search on
    it at 2 devices (records in TMP/res): (graphs folder, graph path, results folder)."""
    from regal import harness

    folder = tmp_path / "graphs"
    folder.mkdir()
    path = one_synthetic_graph(folder, min_ops, max_ops, graph_seed)
    out = tmp_path / "res"
    harness.run_experiment(["brkga", "local-search"], {dataset: folder}, out, seeds=seeds,
                           budgets=budget, devices=[2], workers=1, progress=False)
    return folder, path, out


def refused(argv, capsys, needle: str) -> str:
    """Runs `regal ARGV`: it must exit 2 with no traceback and exactly one error line, which
    names `needle`. Returns stderr."""
    from regal.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2, (argv, err)
    assert "Traceback" not in err
    assert len(errors) == 1 and needle in errors[0], (needle, err)
    return err


def npz_with_member(path, arrays: dict, name: str, shape, dtype, body: bytes | None = None,
                    zip_size: int | None = None):
    """Writes ARRAYS as an `.npz` whose member NAME.npy (added, or in place of that array)
    has a `.npy` header declaring SHAPE of DTYPE and then BODY (None: the zeros the header
    declares, streamed, so a gigabyte member costs no memory here); ZIP_SIZE forges the
    member's size in the zip's central directory. The bloated members of issue 36."""
    import io
    import math
    import struct
    import zipfile
    from pathlib import Path

    np.savez(path, **{key: value for key, value in arrays.items() if key != name})
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": np.dtype(dtype).str,
                                                  "fortran_order": False, "shape": tuple(shape)})
    size = math.prod(shape) * np.dtype(dtype).itemsize
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive, \
            archive.open(f"{name}.npy", "w", force_zip64=size >= 2**31) as member:
        member.write(header.getvalue())
        if body is not None:
            member.write(body)
        zeros = memoryview(bytes(2**20))
        while body is None and size:
            member.write(zeros[:min(size, 2**20)])
            size -= min(size, 2**20)
    if zip_size is not None:  # the central directory entry: 46 fixed bytes, then the name
        blob = bytearray(Path(path).read_bytes())
        at = blob.rindex(f"{name}.npy".encode()) - 46
        blob[at + 24:at + 28] = struct.pack("<I", zip_size)
        Path(path).write_bytes(blob)
    return path


@pytest.fixture
def counted(monkeypatch):
    """Counts chromosomes evaluated through regal.sim.evaluate: {"n": rows so far}."""
    import regal.sim

    rows = {"n": 0}
    real = regal.sim.evaluate

    def counting(graph, devices, keys, *args, **kwargs):
        rows["n"] += len(np.atleast_2d(keys))
        return real(graph, devices, keys, *args, **kwargs)

    monkeypatch.setattr(regal.sim, "evaluate", counting)
    return rows
