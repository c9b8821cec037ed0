"""Aggregates: commands decided into events, hosted over a commands and an events topic."""
