"""The shipped answer-scorer artifact (answer_scorer.json), trained by `llmgw cascade train-scorer`."""
