"""The caches measured (docs/design/015): `bench_lookup` (`make bench-cache`: exact GET and semantic KNN
lookup latency on a throw-away Redis Stack) and `semantic_eval` (`make semantic-threshold`: precision
and recall of the semantic cache per similarity threshold, and its lexical verifier, on the hand-written
pairs in paraphrases*.jsonl; `threshold` holds the pure sweep and cross-validation).
"""
