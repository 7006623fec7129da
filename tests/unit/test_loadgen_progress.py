"""The progress line redraws in place on a terminal and writes plain lines to a file or pipe."""

from __future__ import annotations

import io

from eval.loadgen.progress import Progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_redraws_in_place() -> None:
    out = _Tty()
    bar = Progress("rate 2/s", total=4, duration_s=None, stream=out)
    for ok in (True, False):
        bar.on_sent()
        bar.on_done(ok)
    bar.close()
    text = out.getvalue()
    assert text.startswith("\r") and text.endswith("\n") and text.count("\n") == 1
    assert "done 2" in text and "errors 1" in text and " 50%" in text


def test_pipe_gets_whole_lines_only() -> None:
    out = io.StringIO()
    bar = Progress("concurrency 4", total=None, duration_s=10, stream=out)
    for _ in range(100):
        bar.on_sent()
        bar.on_done(True)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and 1 <= len(lines) <= 2
    assert "done 100" in lines[-1] and "in flight 0" in lines[-1]
