"""Projections: read models folded from aggregates' events, and the signals they send."""
