"""Durable workflows: the agent that steps instances, their store, activities, sends and children."""
