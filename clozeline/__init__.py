"""clozeline's user-facing code: ``clozeline.predict`` runs an exported model exactly as it was evaluated.

The pipeline itself lives in ``tasks/`` (the stages) and ``flows/`` (the Prefect flow).
"""
