"""The resolver: a pure function from a Query (flags or host facts) to the newest consistent stack, or to the
conflicts that stand in the way. query.py parses the flags, checks.py holds the rules, search.py walks the
candidates and assembles the Solution."""
from __future__ import annotations

from envkit.core.resolve.query import find_gpu, parse_query
from envkit.core.resolve.search import resolve

__all__ = ["find_gpu", "parse_query", "resolve"]
