"""The shipped answer-scorer artifacts (answer_scorer.json, step_scorer_auto.json), trained by
`llmgw cascade train-scorer` and read as package data by `router.scorers` (`importlib.resources`);
no Python API."""
