"""A search helper process: reads (token, space, jobs) frames on stdin, writes children on stdout.

Started by `tuner.search.pool`; it ends when its stdin closes (the tuner exited).
"""

from __future__ import annotations

import os
import sys

from tuner.search.pool import read_frame, run_chunk, write_frame


def main() -> None:
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints go to stderr, never into the protocol
    while True:
        try:
            token, payload, jobs = read_frame(inp)  # type: ignore[misc]
        except EOFError:
            return
        write_frame(out, run_chunk(token, payload, jobs))


if __name__ == "__main__":
    main()
