"""The two pipeline tasks of a clozeline export, registered with transformers as this module is imported:
``clozeline-text-classification`` (the evaluated model's cut and pooling) and ``clozeline-token-classification``
(words tagged at their first subword in the window where they have the most context, read into entities as the
evaluation reads them). How they differ from the stock pipelines: ``clozeline.predict``'s docstring."""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    TextClassificationPipeline,
    TokenClassificationPipeline,
)
from transformers.pipelines import PIPELINE_REGISTRY

from clozeline import alignment, entities
from clozeline.encoding import encode_document, encode_words
from clozeline.recipe import AGGREGATIONS, TEXT_TASK, TOKEN_TASK, logits, recipe


class ClozelineTextClassificationPipeline(TextClassificationPipeline):
    """``text-classification`` with the evaluated model's cut and pooling (``clozeline`` block of config.json).

    Input and output as the stock pipeline: a string or ``{"text", "text_pair"}`` (or a list of them);
    ``[{"label", "score"}]``, or every label's probability with ``top_k=None``. Raises ``ValueError`` (one line) for an
    empty or all-whitespace text (either text of a pair), an input of another type, or an unknown keyword
    argument (``truncation`` is taken and changes nothing: the recipe's cut always applies)."""

    def _sanitize_parameters(self, function_to_apply=None, top_k="", truncation=None, **unknown):
        # truncation is taken as the stock pipeline takes it, and changes nothing: the recipe's cut always applies
        if unknown:
            raise ValueError(
                f"{TEXT_TASK}: unknown keyword argument(s) {sorted(unknown)}; it takes function_to_apply, "
                "top_k and truncation (the evaluated model's cut always applies)"
            )
        return super()._sanitize_parameters(function_to_apply=function_to_apply, top_k=top_k)

    def preprocess(self, inputs, **_ignored) -> dict[str, torch.Tensor]:
        if isinstance(inputs, list) and len(inputs) == 1 and isinstance(inputs[0], list) and len(inputs[0]) == 2:
            inputs = {"text": inputs[0][0], "text_pair": inputs[0][1]}
        texts = [inputs.get("text"), inputs.get("text_pair")] if isinstance(inputs, dict) else [inputs]
        if any(not isinstance(t, str) for t in texts):
            raise ValueError(
                f"{TEXT_TASK}: takes a string or {{'text', 'text_pair'}} (or a list of them), got {inputs!r:.80}"
            )
        if any(not t.strip() for t in texts):
            raise ValueError(f"{TEXT_TASK}: empty input ({inputs!r}): there is no text to classify")
        return encode_document(self.tokenizer, inputs, recipe(self.model.config))

    def _forward(self, model_inputs):
        return {"logits": logits(self.model, model_inputs, recipe(self.model.config)["pooling"])}


class ClozelineTokenClassificationPipeline(TokenClassificationPipeline):
    """``token-classification`` on words, one tag per word (the tag at its first subword in its max-context
    window), read as the evaluation reads it (``clozeline.entities``: seqeval, strict IOB2).

    Input: a string, split into words by ``clozeline.entities.split_words`` (punctuation split off, character
    offsets kept), or a list of words with ``is_split_into_words=True`` (offsets into ``delimiter.join(words)``,
    ``delimiter`` default ``" "``). Output, as the stock pipeline's: ``aggregation_strategy="none"`` (default)
    one ``{entity, score, index, word, start, end}`` per word (every word, ``O`` included, unless named in
    ``ignore_labels``); ``"simple"`` or ``"first"`` (the same here: a word is read at its first subword) one
    ``{entity_group, score, word, start, end}`` per entity. Raises ``ValueError`` (one line) for an empty
    input, an unknown keyword argument, ``aggregation_strategy`` ``average``/``max`` (they pool subwords,
    which the evaluated tagger does not), or a string with ``is_split_into_words=True``."""

    def _sanitize_parameters(
        self,
        is_split_into_words: bool = False,
        delimiter: str | None = None,
        aggregation_strategy=None,
        ignore_labels: list[str] | None = None,
        **unknown,
    ):
        if unknown:
            raise ValueError(
                f"{TOKEN_TASK}: unknown keyword argument(s) {sorted(unknown)}; it takes "
                "is_split_into_words, delimiter, aggregation_strategy "
                f"{list(AGGREGATIONS)}, ignore_labels"
            )
        strategy = str(getattr(aggregation_strategy, "value", aggregation_strategy) or "none").lower()
        if strategy not in AGGREGATIONS:
            raise ValueError(
                f"{TOKEN_TASK}: aggregation_strategy {strategy!r} is not one of {list(AGGREGATIONS)} "
                "(the evaluated tagger reads each word at its first subword; average/max pool subwords)"
            )
        return (
            {"is_split_into_words": is_split_into_words, "delimiter": " " if delimiter is None else delimiter},
            {},
            {"aggregation_strategy": strategy, "ignore_labels": list(ignore_labels or [])},
        )

    def __call__(self, inputs, **kwargs):
        result = super().__call__(inputs, **kwargs)
        one_sentence = kwargs.get("is_split_into_words") and inputs and all(isinstance(w, str) for w in inputs)
        return result[0] if one_sentence and result and isinstance(result[0], list) else result

    def preprocess(self, sentence, is_split_into_words: bool = False, delimiter: str = " ", **_stock):
        # the stock pipeline is a ChunkPipeline: preprocess yields chunks; here one chunk holds all windows.
        # _stock: what the stock __call__ passes on (offset_mapping, tokenizer_params), unused here
        if is_split_into_words and isinstance(sentence, str):  # the stock pipeline refuses it too
            raise ValueError(
                f"{TOKEN_TASK}: is_split_into_words=True takes a list of words, got a string "
                f"({sentence[:60]!r}); pass the string without it to have it split"
            )
        if is_split_into_words or isinstance(sentence, list):
            words = [str(w) for w in sentence]
            text, offsets = delimiter.join(words), entities.joined_offsets(words, delimiter)
        else:
            text = str(sentence)
            words, offsets = entities.split_words(text)
        if not words:
            raise ValueError(f"{TOKEN_TASK}: empty input ({sentence!r}): there is no word to tag")
        encoded = encode_words(self.tokenizer, words, recipe(self.model.config))
        yield {**encoded, "text": text, "offsets": offsets, "is_last": True}

    def _forward(self, model_inputs):
        tensors = {k: model_inputs[k] for k in ("input_ids", "attention_mask")}
        passed = {k: model_inputs[k] for k in ("word_ids", "words", "text", "offsets", "is_last")}
        return {"logits": logits(self.model, tensors, "token"), **passed}

    def postprocess(
        self, all_outputs, aggregation_strategy: str = "none", ignore_labels: list[str] | None = None, **_stock
    ) -> list[dict[str, Any]]:
        out = all_outputs[0] if isinstance(all_outputs, list) else all_outputs
        scores = out["logits"].float()
        best = scores.argmax(dim=-1)
        prob = torch.softmax(scores, dim=-1).gather(-1, best.unsqueeze(-1)).squeeze(-1)
        windows = [
            (ids, list(zip(b.tolist(), p.tolist(), strict=True))[: len(ids)])
            for ids, b, p in zip(out["word_ids"], best, prob, strict=True)
        ]
        pairs = alignment.words_from_windows(windows, len(out["words"]))
        tags = [self.model.config.id2label[label] for label, _ in pairs]
        word_scores = [score for _, score in pairs]
        grouped = aggregation_strategy != "none"
        found = (
            entities.entity_groups(out["text"], out["offsets"], tags, word_scores)
            if grouped
            else entities.word_records(out["words"], out["offsets"], tags, word_scores)
        )
        return [r for r in found if r.get("entity_group", r.get("entity")) not in (ignore_labels or [])]  # as stock


PIPELINE_REGISTRY.register_pipeline(
    TEXT_TASK,
    pipeline_class=ClozelineTextClassificationPipeline,
    pt_model=AutoModelForSequenceClassification,
    type="text",
)
PIPELINE_REGISTRY.register_pipeline(
    TOKEN_TASK,
    pipeline_class=ClozelineTokenClassificationPipeline,
    pt_model=AutoModelForTokenClassification,
    type="text",
)
