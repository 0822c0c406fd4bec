"""The params key of the lexical caches (the per-text results, ``tasks/leakage/scan/incremental.py``, and the
planted copies' methods, ``tasks/leakage/planted/cache.py``): what a stored result can depend on among the params.

A stored result is computed by the lexical detectors, which see only ``LexicalParams``, and by the residual scan,
which sees ``residual.ngram_words``. So the key is the lexical sub-model but ``LexicalParams.NOT_IN_RESULTS``
(where the scan runs: ``worker_memory_mib``), plus ``residual`` but ``min_coverage`` (a metrics threshold). A field
added to ``LexicalParams`` keys the caches until it is shown to change no result. Today that keys
``ngram_words``, ``min_match_words``, ``shingle_words``, ``num_perm``, ``minhash_seed``, ``doc_threshold``,
``passage_threshold``, ``passage_words``, ``passage_stride_words``, ``max_span_words``, ``substitution.*`` and
``residual.ngram_words``: the same dict, so the same md5, as when the key was the whole section less a hand list.
"""

from __future__ import annotations

import hashlib
import json

from tasks.config.corpus.leakage import LexicalParams, ResidualParams

#: ``residual`` params that change no stored result: the coverage threshold is applied to the metrics only.
RESIDUAL_NOT_IN_KEY = frozenset({"min_coverage"})


def params_md5(lexical: LexicalParams, residual: ResidualParams) -> str:
    """md5 (hex) of the params a stored lexical or residual result can depend on (see the module docstring)."""
    params = {
        **lexical.model_dump(mode="json", exclude=set(LexicalParams.NOT_IN_RESULTS)),
        "residual": residual.model_dump(mode="json", exclude=set(RESIDUAL_NOT_IN_KEY)),
    }
    return hashlib.md5(json.dumps(params, sort_keys=True).encode("utf-8")).hexdigest()
