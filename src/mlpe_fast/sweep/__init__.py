"""Curves: the measurement points of an MLPerf Endpoints submission.

* :mod:`.regions` -- the concurrency regions of a curve (Ultra Low, Low,
  Medium, High and the 10 % margin) from ``C_max`` and ``C_min``, exactly as
  the official checker computes them (spec §2.2).
* :mod:`.plan` -- which concurrencies to measure, how long each point runs
  and how many queries it issues, and what is wrong with a list the user
  gave (spec §2.1, §2.4).
* :mod:`.runner` -- the sweep itself: every point measured into its own run
  folder, single-turn or agentic, and the curve's report.
"""
