"""The algorithm: draft trees, sampling without replacement, node rules, the decode engine and its metrics."""
