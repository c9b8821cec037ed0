"""Schedules: the schedule aggregate's dispatcher that starts workflows when runs fall due."""
