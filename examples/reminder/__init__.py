"""The reminder example: Ada's daily reminder, a workflow started by a schedule."""
