"""Deriving matrix.toml tables from primary sources: extraction adapters (git, PyPI) and pure derivations."""
