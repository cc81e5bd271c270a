"""The experiment scripts run from their own folder, which Python puts first on sys.path."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_script_hides_a_package_of_the_project():
    """A script named like a package (experiments/baselines.py did) is what `import
    baselines` finds when any script in that folder runs, so the methods' lazy imports fail
    (`bench_policy.py` broke on the policy's gp-dfs reference)."""
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert {"regal", "brkga", "baselines"} <= packages
    scripts = {p.stem for p in (ROOT / "experiments").glob("*.py")}
    assert scripts and not scripts & packages
