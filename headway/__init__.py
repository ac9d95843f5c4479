"""Headway: progress reporting for processes without a screen, over plain HTTP."""

__version__ = "0.1.0"
