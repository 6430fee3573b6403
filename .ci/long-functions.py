#!/usr/bin/env python3
"""List the functions of the product code (engine/, app/, ui/) longer than a limit.

A brace-matching heuristic, not a parser: comments, strings and preprocessor lines are
blanked, then every `{` whose header (the text since the previous `;`, `{` or `}` of the
same scope) has a parameter list and is not a control statement opens a function; its
length runs from the header's first line to the matching `}`. Braces inside a function
(blocks, lambdas, initialisers) count towards it.

A function may be long for a reason: `// long: why` (or the older "Long on purpose:" and
"Over 80 lines:") in the comment block right above its header marks it; it is listed
with its reason.

  .ci/long-functions.py                # the long ones, longest first, and a count
  .ci/long-functions.py --limit 60     # another limit
  .ci/long-functions.py --check        # exit 1 when one has no reason comment
"""
import argparse
import os
import re
import sys

ROOTS = ("engine", "app", "ui")
SUFFIXES = (".cpp", ".hpp", ".h", ".cc")
CONTROL = re.compile(r"^\s*(?:}\s*)?(?:else\s+)?(if|for|while|switch|catch|do|else)\b")
CONTAINER = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$|\bextern\s*$")
# "// long: why" (or the older "Long on purpose: why" and "Over 80 lines: why") in the
# comment block above the header.
REASON = re.compile(r"\blong(?: on purpose)?:|over 80 lines:", re.IGNORECASE)


def blank(text):
    """Comments, string and char literals and preprocessor lines become spaces (newlines
    are kept, so offsets and line numbers stay right)."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out[i] = " "
                    i += 2
                    continue
                out[i] = " "
                i += 1
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out[i] = " "
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            for k in range(i, end):
                if out[k] != "\n":
                    out[k] = " "
            i = end
            continue
        m = re.match(r'R"([^(\s]*)\(', text[i:i + 20])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = ")" + m.group(1) + '"'
            end = text.find(close, i + len(m.group(0)))
            end = n if end < 0 else end + len(close)
            for k in range(i, end):
                if out[k] != "\n":
                    out[k] = " "
            i = end
            continue
        if c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                i += 1
                continue
            k = i + 1
            while k < n and text[k] != c and text[k] != "\n":
                k += 2 if text[k] == "\\" else 1
            for j in range(i + 1, min(k, n)):
                out[j] = " "
            i = k + 1
            continue
        i += 1
    return "".join(out)


def function_name(header):
    """The name before the parameter list, or None when the header is not a function's."""
    flat = " ".join(header.split())
    if not flat or CONTROL.match(flat) or "(" not in flat:
        return None
    depth = 0
    for k, ch in enumerate(flat):  # the first '(' at template depth 0
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            before = flat[:k].rstrip()
            if before.endswith("operator"):
                return before.split()[-1] + flat[k:k + 2]
            m = re.search(r"([~\w:]+(?:operator\s*\S+)?)\s*$", before)
            if not m:
                return None  # a lambda or a cast: part of an initialiser
            name = m.group(1)
            if "=" in before and "operator" not in before:
                return None  # `auto f = [](...) {` or a table initialiser
            if name in ("return", "sizeof", "decltype", "alignas", "static_assert"):
                return None
            return name
    return None


def reason_above(lines, first):
    """The `long:` reason in the comment block just above line `first` (1-based) or on it."""
    block = []
    k = first - 2
    while k >= 0 and lines[k].strip().startswith("//"):
        block.insert(0, lines[k].strip().lstrip("/").strip())
        k -= 1
    text = " ".join(block)
    m = REASON.search(text) or REASON.search(lines[first - 1])
    if not m:
        return ""
    return text[m.start():m.start() + 70] if REASON.search(text) else "(on the header line)"


def functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    text = blank(raw)
    lines = raw.split("\n")
    found = []
    # Scope stack of ("container" | "function" | "block", start line, name).
    stack = []
    header_start = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in ";{}":
            if c == "{":
                in_function = any(kind == "function" for kind, _, _ in stack)
                header = text[header_start:i]
                kind, name = "block", None
                if not in_function:
                    stripped = " ".join(header.split())
                    tail = stripped[stripped.rfind(")") + 1:]  # past a macro like Q_OBJECT(x)
                    if CONTAINER.search(tail):
                        kind = "container"
                    else:
                        name = function_name(header)
                        if name:
                            kind = "function"
                offset = header_start + (len(header) - len(header.lstrip()))
                first = text.count("\n", 0, offset) + 1
                stack.append((kind, first, name))
            elif c == "}" and stack:
                kind, first, name = stack.pop()
                if kind == "function":
                    last = text.count("\n", 0, i) + 1
                    reason = reason_above(lines, first)
                    found.append((last - first + 1, path, first, name, reason))
            header_start = i + 1
        i += 1
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a long function has no // long: comment")
    ap.add_argument("--top", type=int, default=0, help="list only the N longest")
    ap.add_argument("roots", nargs="*", default=list(ROOTS))
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = []
    for root in args.roots:
        for folder, _, files in os.walk(os.path.join(here, root)):
            for name in sorted(files):
                if name.endswith(SUFFIXES):
                    found += functions(os.path.join(folder, name))
    long = sorted((f for f in found if f[0] > args.limit), key=lambda f: (-f[0], f[1]))
    bare = [f for f in long if not f[4]]
    shown = long[:args.top] if args.top else long
    for length, path, line, name, reason in shown:
        where = os.path.relpath(path, here) + ":" + str(line)
        print(f"{length:5d}  {where:48s} {name}" + (f"   [{reason}]" if reason else ""))
    print(f"{len(long)} functions over {args.limit} lines, {len(bare)} without a reason comment "
          f"({len(found)} functions read)")
    return 1 if args.check and bare else 0


if __name__ == "__main__":
    sys.exit(main())
