"""Sagas: state machines over aggregates' events that command aggregates in turn."""
