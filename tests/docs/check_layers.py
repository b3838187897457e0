#!/usr/bin/env python3
"""docs/ARCHITECTURE.md's layer table against the includes of src/.

The table ("## Layers") has a row per folder of src/: its first cell names
the folder (`wire/`), its last what the folder links. That last cell is the
rule: a file under src/<folder>/ may include its own folder's headers and
those of the folders the cell names before the word "never"; what the cell
names after "never" (`backend/cpu/`, engine) it may not include even where
the folder above it is allowed. Folders are named as `name/`, `kvlm_name` or
the bare name; other words (fmt, Boost, OpenSSL) are not folders of src/.

  check_layers.py check ROOT      every include of src/ against the table
  check_layers.py selftest        the checker on a made-up tree: it must
                                  catch a forbidden edge and a missing row
"""
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def src_folders(root):
    src = os.path.join(root, "src")
    return sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))


def names_in(cell, folders):
    """The src/ paths a table cell names: `backend/cpu/`, kvlm_wire, chat."""
    found = []
    for word in re.findall(r"[A-Za-z_][A-Za-z0-9_/]*", cell.replace("`", " ")):
        word = word.rstrip("/")
        if word.startswith("kvlm_"):
            word = word[len("kvlm_"):]
        if word.split("/")[0] in folders:
            found.append(word)
    return found


def layer_rules(root):
    """{folder: (allowed folders, forbidden path prefixes)} from the table."""
    folders = set(src_folders(root))
    text = open(os.path.join(root, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    rules = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        first = re.match(r"`([a-z_]+)/`", cells[0])
        if not first or first.group(1) not in folders:
            continue
        allowed_text, _, never_text = cells[-1].partition("never")
        allowed = {n.split("/")[0] for n in names_in(allowed_text, folders)}
        rules[first.group(1)] = (allowed, names_in(never_text, folders))
    return rules


def violations(root):
    rules = layer_rules(root)
    folders = set(src_folders(root))
    found = [f"src/{f}/: no row in docs/ARCHITECTURE.md's layer table" for f in sorted(folders - rules.keys())]
    for folder in sorted(folders & rules.keys()):
        allowed, forbidden = rules[folder]
        for dirpath, _, files in os.walk(os.path.join(root, "src", folder)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                for inc in INCLUDE.findall(open(path, encoding="utf-8").read()):
                    top = inc.split("/")[0]
                    if top not in folders or "/" not in inc:
                        continue
                    banned = [p for p in forbidden if inc.startswith(p + "/")]
                    if banned:
                        found.append(f"{rel}: includes {inc}, and the table says {folder}/ never uses {banned[0]}/")
                    elif top != folder and top not in allowed:
                        found.append(f"{rel}: includes {inc}, but the table's row for {folder}/ does not list {top}")
    return found


def check(root):
    bad = violations(root)
    for b in bad:
        print(b)
    print(f"{len(bad)} include(s) outside docs/ARCHITECTURE.md's layer table")
    return 1 if bad else 0


def selftest():
    """A made-up tree: wire includes server, model includes backend/cpu, and
    sched has no row. Each must be caught; the allowed edges must not be."""
    with tempfile.TemporaryDirectory() as root:
        files = {
            "src/wire/a.h": '#include "common/x.h"\n#include "server/answer.h"\n',
            "src/model/m.cpp": '#include "backend/ops.h"\n#include "backend/cpu/matmul.h"\n',
            "src/server/s.cpp": '#include "wire/a.h"\n#include <vector>\n',
            "src/sched/q.h": '#include "common/x.h"\n',
            "src/common/x.h": "",
            "src/backend/cpu/matmul.h": "",
            "docs/ARCHITECTURE.md": "\n## Layers\n\n| folder | owns | links |\n| --- | --- | --- |\n"
            "| `common/` | x | fmt |\n| `wire/` | y | common, Boost |\n"
            "| `backend/` | z | common |\n"
            "| `model/` | m | common, backend (never `backend/cpu/`) |\n"
            "| `server/` (library `kvlm_server`) | s | kvlm_wire, common |\n\n## Next\n",
        }
        for rel, body in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(body)
        bad = violations(root)
        expected = ["src/sched/: no row", "src/model/m.cpp: includes backend/cpu/matmul.h",
                    "src/wire/a.h: includes server/answer.h"]
        for e in expected:
            if not any(b.startswith(e) for b in bad):
                print(f"selftest: not caught: {e}\n  got: {bad}")
                return 1
        if len(bad) != len(expected):
            print(f"selftest: caught more than the three: {bad}")
            return 1
    print("selftest: the forbidden edges and the missing row were caught, the allowed ones passed")
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "check":
        return check(argv[2])
    if len(argv) == 2 and argv[1] == "selftest":
        return selftest()
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
