"""The `local-search` method: one climb of REGAL's search engine (`regal.search.climb`) on the
whole budget, from the best of the cheap starts. The engine lives in the core because it is
also the phase that spends most of `regal`'s budget (`regal.search.pipeline`)."""

from regal.search.climb import local_search as solve

__all__ = ["solve"]
