"""Schedules, sensors and the Definitions that ``workspace.yaml`` loads."""
