"""The build planner: a pure function from a resolved Solution and a Site to a BuildPlan, assembled
from building blocks (blocks.py) under a network policy (network.py).

Every step says why it is there and what it reaches over the network (none, the site's own
mirrors, or the internet). With a site file, a step that would reach the internet is refused; with
--offline, every artifact comes from the build context and any step left needing a network is
refused, naming the step.
"""
from __future__ import annotations

from envkit.core.planner.assemble import plan
from envkit.core.planner.context import base_os

__all__ = ["base_os", "plan"]
