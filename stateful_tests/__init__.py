"""Hypothesis state machines that drive a target and its reference model side by side."""

__all__: list[str] = []
