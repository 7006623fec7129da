"""Building the shipped router prior and the cascade's scorer, evaluating them, and replaying a
deployment on routing data (design docs 006, 008, 009, 023, 024).

Commands: `llmgw router train|eval|score|replay` (`router_cli`: `train` -> a difficulty artifact in
router/artifacts/, `router_eval` beside the `baselines`, `replay` + `replay_report`),
`llmgw cascade eval|train-scorer|pool`
(`cascade_cli`: `cascade_eval`, `cascade_report`, `scorer_train`), `make router-encoder` / `make install`
(`export_encoder`: the int8 ONNX MiniLM, with the committed delta in deltas/ applied through
`encoder_delta`), `python -m eval.routing.finetune` (rebuilds that delta),
`python -m eval.routing.calibration_replay` (live calibration across a domain switch) and
`make bench-router` (`bench_serving`). Shared underneath: `data` (routing JSONL), `metrics` (RouteLLM's
APGR, CPT, N-tier plans), `embed_cache` (embeddings through the serving encoder, cached), `plot` (PNGs).

The research scripts that no command needs were retired in issues 23 and 28 (docs/design/008 names them
and the commit with their last version).
"""
