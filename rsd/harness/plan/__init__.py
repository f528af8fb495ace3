"""Pre-flight plan of a sweep (`python -m rsd.harness.plan OVERRIDES`; report.py prints it): its jobs composed
(compose), what they need in memory (memory) against the machine and launcher (resources), and the plan (build)."""
