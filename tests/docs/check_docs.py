#!/usr/bin/env python3
"""The repository's documents against the repository (ctest: docs.*).

  check_docs.py links ROOT
      No file under ROOT points outside the repository: no path into the
      shared folder's docs and no mention of the design and style pages kept
      there by their file names (the architecture is docs/ARCHITECTURE.md,
      the style docs/CONTRIBUTING.md),
      and every relative link of README.md and docs/*.md names a file of the
      repository (and, with #anchor, a heading of that file).

  check_docs.py commands ROOT KVLM [MIN_LINES]
      Every command line in a code block of README.md and docs/*.md that
      runs `build/kvlm` (after a `$ ` prompt or VAR=value assignments) is run
      with KVLM_PARSE_ONLY=1, which ends each kvlm command right after its
      flags parsed (apps/cli_parse.h): a renamed or removed flag, a wrong
      subcommand or a missing required flag fails here. Continuation lines
      (a trailing backslash) are joined; a comment, a pipe, a redirection,
      `&`, `&&` or `;` ends the command. Files are never opened in this mode,
      so placeholders such as MODEL.gguf need no substitution. Fails when
      fewer than MIN_LINES (default 10) command lines were found, so the
      check cannot pass by finding nothing.

  check_docs.py selftest KVLM
      Both checks on a scratch repository with one bad flag and one link
      into the shared docs: each must report exactly its problem.

Failures name the file and line. Exit 0: all good; 1: a failure.
"""
import os
import re
import subprocess
import sys
import tempfile

# Built from parts so this file does not match its own check.
SHARED_DOCS = "../shared" + "/docs"
OUTSIDE_DOCS = re.compile(re.escape(SHARED_DOCS) + r"|\b(DESIGN|STYLE)" + r"\.md\b")
TEXT_SUFFIXES = (".md", ".h", ".cpp", ".c", ".txt", ".cmake", ".sh", ".py", ".js", ".mjs", ".html",
                 ".css", ".json", ".supp", ".dict", ".cfg", ".yml", ".yaml")
SKIP_DIRS = {".git", "node_modules", ".cache"}


def source_files(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build"))
        for f in sorted(files):
            if f.endswith(TEXT_SUFFIXES) or f in ("run",):
                yield os.path.join(d, f)


def doc_files(root):
    files = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        files += [os.path.join(docs, f) for f in sorted(os.listdir(docs)) if f.endswith(".md")]
    return [f for f in files if os.path.isfile(f)]


def read_lines(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().split("\n")


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|\[|\]\([^)]*\)", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    in_code = False
    for line in read_lines(path):
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        s = slug(line.lstrip("#"))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def check_links(root):
    root = os.path.realpath(root)
    problems = []
    for path in source_files(root):
        for i, line in enumerate(read_lines(path), 1):
            m = OUTSIDE_DOCS.search(line)
            if m:
                problems.append(f"{os.path.relpath(path, root)}:{i}: points outside the repository "
                                f"({m.group(0)}): {line.strip()}")
    for path in doc_files(root):
        in_code = False
        for i, line in enumerate(read_lines(path), 1):
            if line.lstrip().startswith(("```", "~~~")):
                in_code = not in_code
            if in_code:
                continue
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue  # http:, https:, mailto:
                file_part, _, anchor = target.partition("#")
                where = os.path.realpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                name = f"{os.path.relpath(path, root)}:{i}"
                if not (where == root or where.startswith(root + os.sep)):
                    problems.append(f"{name}: link leaves the repository: {target}")
                elif not os.path.exists(where):
                    problems.append(f"{name}: link to a missing file: {target}")
                elif anchor and where.endswith(".md") and anchor not in anchors(where):
                    problems.append(f"{name}: link to a missing heading: {target}")
    return problems


def split_command(line):
    """The words of a shell command line up to its first comment, pipe,
    redirection, `&` or `;` (quotes and backslashes as the shell reads them)."""
    words, word, quote, have_word = [], "", None, False
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"' and i + 1 < len(line) and line[i + 1] in '"\\$`':
                i += 1
                word += line[i]
            else:
                word += c
        elif c in "'\"":
            quote, have_word = c, True
        elif c == "\\" and i + 1 < len(line):
            i += 1
            word, have_word = word + line[i], True
        elif c.isspace():
            if have_word:
                words.append(word)
            word, have_word = "", False
        elif c == "#" and not have_word:
            break
        elif c in "|&;<>":
            if have_word and not (c in "<>" and word.isdigit()):  # 2>&1: the 2 is no argument
                words.append(word)
            word, have_word = "", False
            break
        else:
            word, have_word = word + c, True
        i += 1
    if have_word:
        words.append(word)
    return words


def kvlm_commands(path):
    """(line number, text, argv after build/kvlm) of each build/kvlm line in a code block."""
    out = []
    lines = read_lines(path)
    in_code = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
            i += 1
            continue
        first = i + 1
        if in_code:
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1] + " " + lines[i].strip()
            words = split_command(re.sub(r"^\s*\$\s+", "", line))
            while words and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                words.pop(0)
            if words and words[0] == "build/kvlm":
                out.append((first, line.strip(), words[1:]))
        i += 1
    return out


def check_commands(root, kvlm, min_lines=10):
    kvlm = os.path.abspath(kvlm)
    env = dict(os.environ, KVLM_PARSE_ONLY="1")
    problems, num_lines = [], 0
    for path in doc_files(root):
        for lineno, text, args in kvlm_commands(path):
            num_lines += 1
            name = f"{os.path.relpath(path, root)}:{lineno}"
            try:
                r = subprocess.run([kvlm] + args, cwd=root, env=env, stdin=subprocess.DEVNULL,
                                   capture_output=True, text=True, timeout=60)
            except subprocess.TimeoutExpired:
                problems.append(f"{name}: did not parse within 60 s (does {kvlm} honour KVLM_PARSE_ONLY?): {text}")
                continue
            if r.returncode != 0:
                why = (r.stderr.strip() or r.stdout.strip()).split("\n")[0]
                problems.append(f"{name}: does not parse (exit {r.returncode}: {why}): {text}")
    if num_lines < min_lines:
        problems.append(f"only {num_lines} build/kvlm command lines found in README.md and docs/*.md "
                        f"(expected at least {min_lines}): is the extraction broken?")
    print(f"check_docs: {num_lines} build/kvlm command lines", file=sys.stderr)
    return problems


def selftest(kvlm):
    with tempfile.TemporaryDirectory() as root:
        os.mkdir(os.path.join(root, "docs"))
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("# t\n\nSee [the design](" + SHARED_DOCS + "/x.md) and [here](#t).\n\n```sh\n"
                    "build/kvlm run -m MODEL.gguf -p \"a | b\" -n 4 2>&1 | head  # fine\n"
                    "build/kvlm serve -m M.gguf \\\n    --no-such-flag 3 &\n```\n")
        problems = check_links(root)
        expect_links = [p for p in problems if "README.md:3:" in p]
        problems += check_commands(root, kvlm, min_lines=2)
        bad_flag = [p for p in problems if p.startswith("README.md:7: does not parse")]
        if len(problems) != 3 or len(expect_links) != 2 or len(bad_flag) != 1:
            print("selftest: expected the shared-docs path (twice: text and link) and the bad flag "
                  "on README.md:7, got:\n  " + "\n  ".join(problems), file=sys.stderr)
            return 1
    print("selftest: both checks report what they must", file=sys.stderr)
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "links":
        problems = check_links(argv[2])
    elif len(argv) >= 4 and argv[1] == "commands":
        problems = check_commands(argv[2], argv[3], int(argv[4]) if len(argv) > 4 else 10)
    elif len(argv) == 3 and argv[1] == "selftest":
        return selftest(argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
