"""Worker process that runs math-verify for :mod:`corl_vl.answers.mathverify_pool`.

Run as a script (``python _mv_worker.py MEM_BYTES``), not imported: it reads one JSON ``[gold, pred]`` per line
on stdin and answers ``1`` or ``0`` per line on stdout; a JSON ``{"extract": text}`` line is answered with the
JSON string math-verify extracts from the text (or ``null``). It lives in its own process so the parent can kill it
when sympy hangs (math-verify's own timeouts use ``signal.alarm``, which fails outside the main thread), and
it caps its address space so a runaway big-integer computation dies with MemoryError instead of swapping.
"""

import sys

# Running as a script puts this folder first on sys.path; drop it so sibling modules never shadow a library.
sys.path.pop(0)

import contextlib
import json
import logging
import resource


def _limit_memory(limit: int) -> None:
    if limit > 0:
        with contextlib.suppress(ValueError, OSError):  # a stricter hard limit is already in place
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main() -> None:
    _limit_memory(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    logging.disable(logging.WARNING)  # math-verify warns once per process that we disabled its timeouts
    # lazy: math_verify
    from math_verify import parse, verify

    def check(gold: str, pred: str) -> bool:
        # Both sides are extracted answers; \boxed{} tells math-verify's LaTeX extractor where they are.
        g = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
        if not g:
            return False
        p = parse(f"\\boxed{{{pred}}}", parsing_timeout=None)
        return bool(p) and bool(verify(g, p, timeout_seconds=None))

    def extract(text: str) -> str | None:
        # parse() returns [sympy object, matched string] for the answer it finds; keep the string.
        try:
            found = parse(text, parsing_timeout=None)
        except (Exception, RecursionError, MemoryError):
            return None
        return str(found[-1]) if len(found) >= 2 else None

    check("\\frac{1}{2}", "0.5")  # warm up sympy and the LaTeX grammar before saying ready
    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
        except ValueError:
            request = None
        if isinstance(request, dict):  # {"extract": text}: math-verify's own answer extraction
            out.write(json.dumps(extract(str(request.get("extract", "")))).encode() + b"\n")
            out.flush()
            continue
        try:
            gold, pred = request
            ok = check(str(gold), str(pred))
        except (Exception, RecursionError, MemoryError):
            ok = False
        out.write(b"1\n" if ok else b"0\n")
        out.flush()


if __name__ == "__main__":
    main()
