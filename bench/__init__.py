"""Benchmarks that print ratios measured in one run (not part of CI). See bench/README.md."""
