"""`make test`'s layers, each timed: every layer runs even when an earlier one failed, and the last step
prints the wall time of each and fails if any layer failed.

    python -m tests.support.layers start LOG                    # a new run: LOG holds its start time
    python -m tests.support.layers run LOG NAME [--pytest] [--buffer] -- CMD ...
    python -m tests.support.layers report LOG                   # the table; exit 1 if a layer failed

`run` appends "NAME<TAB>seconds<TAB>exit status" to LOG and exits 0 itself, so that make goes on to the next
layer. `--pytest`: exit status 5 (no tests collected, e.g. a layer whose tests all deselected) is a pass.
`--buffer`: the command's output is held and printed in one piece when it ends, for a layer that runs
beside another one (their lines would interleave). The report gives each layer's time, their sum, and
the wall time since `start` (less than the sum when layers ran side by side).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

NO_TESTS = 5  # pytest's exit status when it collected nothing
START = "#start"


def start(log: Path) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"{START}\t{time.time():.1f}\n")
    return 0


def run(log: Path, name: str, cmd: list[str], pytest: bool, buffer: bool = False) -> int:
    header = f"\n=== {name}: {' '.join(cmd)}"
    if not buffer:
        print(header, flush=True)
    t0 = time.monotonic()
    output = ""
    try:
        if buffer:
            # close_fds=False: a `make` layer keeps the jobserver of the `make -j2` running the lanes.
            done = subprocess.run(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False, close_fds=False
            )
            status, output = done.returncode, done.stdout.decode(errors="replace")
        else:
            status = subprocess.call(cmd, close_fds=False)
    except OSError as e:  # not even started (a missing binary)
        output += f"{name}: {e}\n"
        status = 127
    seconds = time.monotonic() - t0
    if pytest and status == NO_TESTS:
        status = 0
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(f"{name}\t{seconds:.1f}\t{status}\n")
    if buffer:
        print(f"{header}\n{output.rstrip()}", flush=True)
    elif output:
        print(output.rstrip(), file=sys.stderr, flush=True)
    result = "ok" if status == 0 else f"FAILED (exit {status})"
    print(f"=== {name}: {result} in {_clock(seconds)}", flush=True)
    return 0


def report(log: Path) -> int:
    lines = [line.split("\t") for line in log.read_text().splitlines() if line.strip()]
    started = [float(fields[1]) for fields in lines if fields[0] == START]
    rows = [fields for fields in lines if fields[0] != START]
    width = max([len("sum of the layers"), *(len(name) for name, _, _ in rows)])
    failed = [name for name, _, status in rows if status != "0"]
    print(f"\n{'layer':<{width}}  {'time':>8}  result")
    for name, seconds, status in rows:
        result = "ok" if status == "0" else f"FAILED (exit {status})"
        print(f"{name:<{width}}  {_clock(float(seconds)):>8}  {result}")
    print(f"{'sum of the layers':<{width}}  {_clock(sum(float(seconds) for _, seconds, _ in rows)):>8}")
    if started:
        print(f"{'wall time':<{width}}  {_clock(time.time() - started[0]):>8}")
    print(f"{'make test':<{width}}  {'':>8}  {'FAILED: ' + ', '.join(failed) if failed else 'ok'}")
    return 1 if failed else 0


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}:{secs:02d}"


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "start":
        return start(Path(argv[1]))
    if len(argv) >= 2 and argv[0] == "report":
        return report(Path(argv[1]))
    if len(argv) >= 5 and argv[0] == "run" and "--" in argv:
        split = argv.index("--")
        log, name, *flags = argv[1:split]
        cmd = argv[split + 1 :]
        if set(flags) <= {"--pytest", "--buffer"} and cmd:
            return run(Path(log), name, cmd, pytest="--pytest" in flags, buffer="--buffer" in flags)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
