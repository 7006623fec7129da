"""Routing: the difficulty model (MiniLM embedding + trained head), the routing policy, the cascade.

Nothing here imports `gateway`, FastAPI or `eval` (design §2). The difficulty model's serving path needs
only numpy, onnxruntime and tokenizers; the encoder it runs is exported at build time
(`make router-encoder`, eval/routing/export_encoder.py).

Names are imported from their modules (no package facade, docs/design/018-layout.md), so that an
`import router.config` (the gateway's config loading: the routed alias's configuration, with
`router.text` and `router.artifact_error`) loads only what it names. The rest of the public API:

- the policy and its plan data, pure but ~5% more instructions on the config path (their dataclass
  and enum definitions): `router.policy` (plan_route, resolve_thresholds, start_tier), `router.plan`
  (Plan, Step, Call, Answer, EscalationReason, total_cost, total_tokens);
- the cascade and its scorers (json and the feature regexes, ~12 ms more on the config path):
  `router.cascade` (Cascade, Accept, Escalate, Fail), `router.scorers` (Scorer, TrainedAnswerScorer,
  Agreement, LogprobConfidence, ScorerArtifactError, build_scorer), `router.answers` (FinalAnswer,
  final_answer, last_question, options), `router.answer_features` (features, context_features,
  N_FEATURES, DENSE, HASH_BUCKETS, CONTEXT_BUCKETS);
- numpy (and, on first use, onnxruntime + tokenizers): `router.difficulty` (DifficultyModel,
  DEFAULT_MAX_BATCH), `router.embedding` (QuestionEmbedder), `router.encoder` (Encoder, Embeddings,
  ROUTER_LAYERS, FULL_LAYERS, ENCODER_MANIFEST, PROBE_TEXT, default_encoder_dir, variant_file),
  `router.artifact` (load_artifact, write_artifact, sha256_file, default_artifact_dir), `router.head`
  (Head, Component, fit_knn, fit_ridge, empirical_cdf, quantize_rows, to_share), `router.lexical`
  (LexicalComponent, fit_lexical, hashed_terms, LEXICAL_CHARS).
"""
