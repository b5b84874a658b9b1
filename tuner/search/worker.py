"""A search helper process: reads (token, space, jobs) frames on stdin, writes children on stdout.

Started by `tuner.search.pool`; it ends when its stdin closes (the tuner exited).
A Ctrl-C is the parent's to handle: the helper ignores SIGINT (set before the
heavy imports), so an interrupted tune prints no traceback from here.
"""

from __future__ import annotations

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)

import os  # noqa: E402
import sys  # noqa: E402

from tuner.search.pool import read_frame, run_chunk, write_frame  # noqa: E402


def main() -> None:
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints go to stderr, never into the protocol
    while True:
        try:
            token, payload, jobs = read_frame(inp)  # type: ignore[misc]
        except EOFError:
            return
        try:
            write_frame(out, run_chunk(token, payload, jobs))
        except BrokenPipeError:
            return  # the tuner stopped (Ctrl-C) before reading this chunk


if __name__ == "__main__":
    main()
