"""REGAL: placement and scheduling of computation graphs (README.md, docs/design.md)."""


def version() -> str:
    """regal's version (package metadata), or 'unknown' when run from a bare source tree:
    the one lookup that records, solution files and `regal --version` share."""
    try:
        from importlib.metadata import version as installed
        return installed("regal")
    except Exception:  # not installed: running from a source tree
        return "unknown"
