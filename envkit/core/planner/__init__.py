"""The build planner: a pure function from a resolved Solution and a Site to a BuildPlan, assembled
from building blocks (blocks.py) under a network policy (network.py).

Every step says why it is there and what it reaches over the network (none, the site's own
mirrors, or the internet). With a site file, a step that would reach the internet is refused; with
--offline, every artifact comes from the build context and any step left needing a network is
refused, naming the step.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envkit.core.planner.assemble import plan
    from envkit.core.resolve.base_image import base_os

__all__ = ["base_os", "plan"]


def __getattr__(name: str) -> Any:
    """`plan` and `base_os` load on first use (PEP 562); base_os is the resolver's (core/resolve/base_image.py)."""
    if name == "plan":
        from envkit.core.planner import assemble
        return assemble.plan
    if name == "base_os":
        from envkit.core.resolve import base_image
        return base_image.base_os
    raise AttributeError(name)
