"""The simulator's speculative decoding: counters like vLLM's, and a step time that makes speculation
a win at small batch and a loss at large batch (virtual clock: measured in simulated time)."""

from __future__ import annotations

import argparse

import pytest

from eval.sim import cli
from eval.sim.engine import Engine, Sequence
from eval.sim.metrics import build_registry, render
from eval.sim.profile import load_profile
from tests.support.prom import metric


def _engine(spec: dict[str, float] | None, profile: str = "small", seed: int = 0) -> Engine:
    over: dict[str, object] = {"seed": seed}
    if spec is not None:
        over["speculative"] = spec
    return Engine(load_profile(profile, over))


def _run(engine: Engine, batch: int, output_len: int = 200) -> list[Sequence]:
    seqs = [engine.add(Sequence(100, [], output_len, "length", 0.0)) for _ in range(batch)]
    now = 0.0
    while engine.has_work:
        now += engine.step(now).duration
    return seqs


def _tpot_ms(seqs: list[Sequence]) -> float:
    per = [
        (s.last_token_time - s.first_token_time) / (s.num_emitted - 1)
        for s in seqs
        if s.first_token_time is not None
    ]
    return 1000 * sum(per) / len(per)


K3 = {"num_speculative_tokens": 3}


def test_counters_add_up_and_every_answer_has_its_length() -> None:
    e = _engine(K3)
    seqs = _run(e, batch=4, output_len=50)
    st = e.spec_stats
    assert all(s.num_emitted == 50 and s.finished for s in seqs)
    assert e.stats.generation_tokens == 200
    assert sum(st.per_position) == st.accepted
    assert st.per_position == sorted(st.per_position, reverse=True)  # a later position needs the earlier
    assert st.drafts * 3 >= st.draft_tokens > st.drafts * 2  # short drafts only near the end
    # Tokens = first tokens + one per decode step + accepted drafts; steps >= drafts.
    decode_steps = 200 - 4 - st.accepted
    assert decode_steps >= st.drafts


@pytest.mark.parametrize(("p", "length"), [(0.0, 1.0), (1.0, 4.0)])
def test_acceptance_bounds(p: float, length: float) -> None:
    e = _engine({**K3, "acceptance": p})
    _run(e, batch=2, output_len=201)  # 200 after the first token: a multiple of 4, so no short draft
    st = e.spec_stats
    assert 1 + st.accepted / st.drafts == length


def test_default_acceptance_reproduces_the_measured_mean_length() -> None:
    e = _engine(K3)
    _run(e, batch=16, output_len=400)
    st = e.spec_stats
    # vLLM CPU ngram, k=3: mean acceptance length 2.88; the model's expectation is 1 + .78 + .61 + .47.
    assert 1 + st.accepted / st.drafts == pytest.approx(2.86, abs=0.06)


def test_speculation_wins_at_small_batch_and_loses_at_large_batch() -> None:
    small_plain, small_spec = _tpot_ms(_run(_engine(None), 1)), _tpot_ms(_run(_engine(K3), 1))
    large_plain, large_spec = _tpot_ms(_run(_engine(None), 192)), _tpot_ms(_run(_engine(K3), 192))
    assert small_spec < 0.5 * small_plain  # memory-bound: ~2.9 tokens per step for ~the same step
    assert large_spec > 1.05 * large_plain  # compute-bound: 4 verified positions per ~2.9 emitted


def test_a_draft_model_costs_time() -> None:
    free = _tpot_ms(_run(_engine(K3), 1))
    costly = _tpot_ms(_run(_engine({**K3, "draft_step_ms": 2.0}), 1))
    assert costly > free + 1.5  # 3 draft positions x 2 ms per step, over ~2.9 tokens


def test_metrics_have_vllms_names_and_labels() -> None:
    e = _engine(K3, profile="instant")
    e.complete_now(Sequence(10, [], 40, "length", 0.0), 0.0)
    text = render(build_registry(e, "tiny", legacy=False)).decode()
    st = e.spec_stats
    assert st.drafts > 0
    assert metric(text, "vllm:spec_decode_num_drafts_total") == st.drafts
    assert metric(text, "vllm:spec_decode_num_draft_tokens_total") == st.draft_tokens
    assert metric(text, "vllm:spec_decode_num_accepted_tokens_total") == st.accepted
    for i in range(3):
        labels = f'engine="0",model_name="tiny",position="{i}"'
        assert f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels}}}" in text
    assert metric(text, "vllm:generation_tokens_total") == 40
    plain = render(build_registry(_engine(None, profile="instant"), "tiny", legacy=False)).decode()
    assert "spec_decode" not in plain  # registered only with a speculative config, like vLLM


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser)
    return parser.parse_args(list(argv))


def test_cli_takes_vllms_flag() -> None:
    spec = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,"prompt_lookup_min":1}'
    over = cli._overrides(_args("--speculative-config", spec, "--spec-acceptance", "0.5"))
    profile = load_profile("small", over)
    assert profile.speculative is not None
    assert (profile.speculative.num_speculative_tokens, profile.speculative.acceptance) == (3, 0.5)
    with pytest.raises(ValueError, match="needs --speculative-config"):
        cli._overrides(_args("--spec-acceptance", "0.5"))
    with pytest.raises(ValueError, match="num_speculative_tokens is required"):
        cli._overrides(_args("--speculative-config", '{"method":"ngram"}'))
