"""clozeline stages: `python -m tasks <stage>` runs one (see tasks/CONTRACTS.md and docs/layout.md)."""
