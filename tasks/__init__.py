"""clozeline stages: `python -m tasks <stage>` runs one (see tasks/CONTRACTS.md and the README Layout section)."""
