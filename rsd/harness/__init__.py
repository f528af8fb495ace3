"""The harness: typed config, run planning, the results store and records, sweeps and the pre-flight check."""
