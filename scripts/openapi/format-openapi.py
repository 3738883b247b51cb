#!/usr/bin/env python3
"""Writes docs/openapi.json in its layout (width 100).

    scripts/openapi/format-openapi.py [--check] [docs/openapi.json]

An object or array is written on one line when that line, with its indentation, its key and a
comma after it (whether or not one follows), fits in 100 columns; a list of scalars that does not
fit is packed as many items a line as fit (each counted with its comma); anything else is
expanded with a 2-space indent. One-line pieces are json.dumps(..., separators=(", ", ": "),
ensure_ascii=False). With --check, exits 1 when the file is not in this layout.
"""

import json
import os
import sys

WIDTH = 100
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one_line(value):
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=False)


def is_scalar(value):
    return not isinstance(value, (dict, list))


def emit(value, indent, prefix, suffix, out):
    """Appends the lines of `value`; `prefix` (a key) and `suffix` (a comma) go on its lines."""
    pad = " " * indent
    flat = pad + prefix + one_line(value) + suffix
    # Measured as if a comma followed, whether or not one does.
    if is_scalar(value) or len(pad + prefix + one_line(value) + ",") <= WIDTH or not value:
        out.append(flat)
        return
    inner = " " * (indent + 2)
    if isinstance(value, list):
        out.append(pad + prefix + "[")
        if all(is_scalar(v) for v in value):
            line = ""
            for i, v in enumerate(value):
                piece = one_line(v) + ("," if i + 1 < len(value) else "")
                if line and len(inner + line + " " + one_line(v) + ",") > WIDTH:
                    out.append(inner + line)
                    line = piece
                else:
                    line = line + " " + piece if line else piece
            if line:
                out.append(inner + line)
        else:
            for i, v in enumerate(value):
                emit(v, indent + 2, "", "," if i + 1 < len(value) else "", out)
        out.append(pad + "]" + suffix)
    else:
        out.append(pad + prefix + "{")
        items = list(value.items())
        for i, (k, v) in enumerate(items):
            emit(v, indent + 2, one_line(k) + ": ", "," if i + 1 < len(items) else "", out)
        out.append(pad + "}" + suffix)


def render(doc):
    out = []
    emit(doc, 0, "", "", out)
    return "\n".join(out) + "\n"


def main(argv):
    args = [a for a in argv[1:] if a != "--check"]
    path = args[0] if args else os.path.join(ROOT, "docs", "openapi.json")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    formatted = render(json.loads(text))
    if "--check" in argv:
        if formatted != text:
            print(f"format-openapi: {path} is not in its layout", file=sys.stderr)
            return 1
        return 0
    if formatted != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(formatted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
