"""Sinks: where a dataset's rows are stored. Each only stores; the write planner and the
transaction driver decide what to store and when it counts."""
