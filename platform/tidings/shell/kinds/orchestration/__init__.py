"""Hosted orchestrations: coordinations keyed by instance over aggregates' events."""
