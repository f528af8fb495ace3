"""Results -> tidy tables -> markdown tables and figures: `python -m analysis.report RUN_DIRS... --out DIR`."""
