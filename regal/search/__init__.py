"""REGAL's search engine (docs/design.md §6): the peak-directed climb (`climb`, with its
`moves` and `starts`), how a run's budget is split (`schedule`), and the pipeline of BRKGA
then raced climbs (`pipeline`) that `regal` runs with its policy's settings and
`seeded-brkga` without."""
