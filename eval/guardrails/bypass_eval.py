"""The guardrails against disguised input (issue 39's bypass corpus), before and after reading views.

    python -m eval.guardrails.bypass_eval

eval/guardrails/bypass.jsonl (42 cases): a known injection,
secret, personal datum or exfiltration URL disguised by Cyrillic look-alikes, fullwidth or mathematical
letters, zero-width spaces inside or between words, soft hyphens, combining accents, `_` separators,
base64 or hex, tag characters, no-break or ideographic spaces, a message's `name`, or split across two
content parts or two messages. Each case names the detector that must catch it.

- **block**: the request screened with that detector in `block` mode must be refused.
- **redact**: screened in `redact` mode, the rewritten request screened again in `block` mode must pass
  (nothing of it left for the detector to find).
- **benign false positives**: the benign rows of eval/guardrails/corpus.jsonl (code, math, chat, hard
  cases, tool output) screened with every detector in `block` mode: the share refused.

"before" reads each text as it is (what the detectors did before the views); "after" is `screen`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from eval.guardrails.corpus_eval import load as load_corpus
from gateway.edge.exchange import Kind
from gateway.guardrails.detectors import DETECTORS, Detector
from gateway.guardrails.plan import GuardPlan
from gateway.guardrails.screen import screen

BYPASS = Path(__file__).with_name("bypass.jsonl")
_BY_NAME = {d.name: d for d in DETECTORS}


def load(path: Path = BYPASS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _plan(detectors: list[Detector], mode: str) -> GuardPlan:
    return GuardPlan(detectors=tuple((d, mode) for d in detectors))  # type: ignore[misc]


def _raw_texts(messages: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, list):
            out += [p["text"] for p in c if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return out


def caught(case: dict[str, Any], mode: str, views: bool = True) -> bool:
    """Whether the case's detector catches it in `mode` (see the module docstring)."""
    detector = _BY_NAME[case["detector"]]
    body = {"model": "m", "messages": copy.deepcopy(case["messages"])}
    if not views:  # before: each text as it is
        texts = _raw_texts(body["messages"])
        if mode == "block":
            return any(detector.find(t, False) for t in texts)
        redacted = [detector.redact(t, False) for t in texts]
        return not any(detector.find(t, False) for t in redacted) and redacted != texts
    events, refused = screen(Kind.CHAT, body, _plan([detector], mode))
    if mode == "block":
        return refused is not None
    _, again = screen(Kind.CHAT, body, _plan([detector], "block"))
    return again is None and any(e.action == "redacted" for e in events)


def benign_fp(views: bool = True) -> tuple[int, int]:
    """(benign rows refused by any detector in block mode, benign rows)."""
    rows = [r for r in load_corpus() if not r.labels]
    flagged = 0
    for r in rows:
        role = "tool" if r.role == "tool" else "user"
        msgs = [{"role": role, "content": r.text}]
        if views:
            _, refused = screen(Kind.CHAT, {"model": "m", "messages": msgs}, _plan(list(DETECTORS), "block"))
            flagged += refused is not None
        else:
            flagged += any(d.find(r.text, role == "tool") for d in DETECTORS)
    return flagged, len(rows)


def main() -> int:
    cases = load()
    print(f"{len(cases)} disguised cases (eval/guardrails/bypass.jsonl)")
    for mode in ("block", "redact"):
        for views in (False, True):
            misses = [c["id"] for c in cases if not caught(c, mode, views)]
            side = "after (views)" if views else "before (texts as they are)"
            got = len(cases) - len(misses)
            print(f"  {mode:6} {side:28} caught {got}/{len(cases)}, misses {len(misses)}")
            if views and misses:
                print("    " + ", ".join(misses))
    for views in (False, True):
        n, total = benign_fp(views)
        side = "after (views)" if views else "before (texts as they are)"
        print(f"  benign false positives, {side}: {n}/{total} = {n / total:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
