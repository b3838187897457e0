#!/usr/bin/env python3
"""The repository's documents against the repository (ctest: docs.*).

  check_docs.py links ROOT
      No file under ROOT points outside the repository: no path into the
      shared folder's docs and no mention of the design and style pages kept
      there by their file names (the architecture is docs/ARCHITECTURE.md,
      the style docs/CONTRIBUTING.md); README.md and docs/*.md name no script
      of the shared folder's bench kit (its data, such as models, they may);
      no file names an issue number (the word issue, a space, a number);
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

  check_docs.py cited ROOT KVLM
      What README.md and docs/*.md cite exists. In their prose's code spans:
      a path under a top folder (src/, tests/, apps/, scripts/, bench/, docs/,
      deploy/, models/, cmake/; globs and {a,b} allowed) is a file or folder
      of the repository, and a source file named without one (kv/block_table.h,
      engine.cpp) is the end of some file's path; a test name (Suite.Name,
      Suite.*, Suite.Prefix*; lower-case suites only where tests/CMakeLists.txt
      names its own tests so, as docs.*) is declared in tests/ (TEST, TEST_F,
      TEST_P, TYPED_TEST, KVLM_JINJA_RENDER_SUITE) or by add_test; a --flag is
      in the --help of some kvlm command (bench's kinds and kv's tools
      included), or written as a string in a script of bench/, scripts/ or
      tests/, or in OTHER_TOOLS_FLAGS with its program; a KVLM_ name appears
      in the code. In their code blocks: a script under a top folder exists,
      --gtest_filter patterns and ctest -R / -L regexes match some test or
      label, and the flags of bench/, scripts/ and python3 lines are known as
      above (a build/kvlm line's flags are the commands check's).

  check_docs.py selftest KVLM
      Every check on a scratch repository with good and bad citations: each
      bad one (an outside link, a shared bench script, an issue number, a
      flag kvlm rejects, a missing path, script and file name, a missing
      test, gtest filter, ctest regex and label, an unknown --flag and KVLM_
      name) must be reported on its line, and nothing else.

Failures name the file and line. Exit 0: all good; 1: a failure.
"""
import fnmatch
import os
import re
import subprocess
import sys
import tempfile

# Built from parts so this file does not match its own check.
SHARED_DOCS = "../shared" + "/docs"
OUTSIDE_DOCS = re.compile(re.escape(SHARED_DOCS) + r"|\b(DESIGN|STYLE)" + r"\.md\b")
# The shared folder's scripts (its bench kit) are not the repository's: a
# document says what the repository's own bench/ does, or describes the step.
# Its data (models, vocabularies, texts, templates, goldens) may be cited.
# An issue tracker's numbers mean nothing to a reader of the repository: a
# comment or document says what the work was, not which ticket asked for it.
ISSUE_NUMBER = re.compile(r"\b[Ii]ssues? " + r"#?[0-9]+\b")
SHARED_SCRIPTS = re.compile(r"\bshared/" + r"bench\b")
TEXT_SUFFIXES = (".md", ".h", ".cpp", ".c", ".txt", ".cmake", ".sh", ".py", ".js", ".mjs", ".html",
                 ".css", ".json", ".supp", ".dict", ".cfg", ".yml", ".yaml")
SKIP_DIRS = {".git", "node_modules", ".cache", ".venv"}  # .venv: tests/py's installed clients


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
            m = ISSUE_NUMBER.search(line)
            if m:
                problems.append(f"{os.path.relpath(path, root)}:{i}: names an issue number "
                                f"({m.group(0)}): {line.strip()}")
    for path in doc_files(root):
        in_code = False
        for i, line in enumerate(read_lines(path), 1):
            m = SHARED_SCRIPTS.search(line)
            if m:
                problems.append(f"{os.path.relpath(path, root)}:{i}: points outside the repository "
                                f"({m.group(0)}, the shared folder's scripts): {line.strip()}")
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


# --- What the documents cite: paths, test names, flags, KVLM_ names ----------

# Top folders of the repository: a cited path that starts with one names a
# file or folder relative to the root.
TOP_DIRS = ("src", "tests", "apps", "scripts", "bench", "docs", "deploy", "models", "cmake")
# A cited name with one of these endings (a path without a top folder, such
# as kv/block_table.h, or a bare file name, such as engine.cpp) must be the
# end of some file's path in the repository; in a code block, a word under a
# top folder with one of the script endings must exist (bench/ab.py), while
# other words there may be files a command writes.
SCRIPT_SUFFIXES = (".h", ".cpp", ".c", ".py", ".sh", ".mjs", ".js", ".cmake", ".supp", ".dict")
SOURCE_SUFFIXES = SCRIPT_SUFFIXES + (".md",)
# Names of that kind that are not files of the repository, each with why.
NOT_REPO_FILES = {
    "snake_case.h": "the pattern of a file name, not a file",
}
# Flags the documents cite that belong to other programs than kvlm and the
# repository's scripts, each with the program (a flag of kvlm must be in the
# --help of one of its commands; a flag of bench/ or scripts/ in that
# script's source).
OTHER_TOOLS_FLAGS = {
    "--test-dir": "ctest",
    "--target": "cmake --build",
    "--build": "cmake",
    "--gtest_filter": "a gtest binary",
    "--allow-requantize": "llama.cpp's llama-quantize",
    "--enable-prompt-tokens-details": "vLLM's server",
}
PATH_WORD = re.compile(r"(?<![\w./$~-])((?:\.\./)?[A-Za-z0-9_.*{},-]+(?:/[A-Za-z0-9_.*{},-]*)+)")
BARE_FILE = re.compile(r"(?<![\w./$~-])([A-Za-z0-9_*-]+(?:\.[A-Za-z0-9_]+)*)(?![\w/-])")
TEST_NAME = re.compile(r"(?<![\w./:-])([A-Za-z][A-Za-z0-9_]*)\.(\*|[A-Z][A-Za-z0-9_]*\*?)(?![\w(/:-])")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9_-]*[a-z0-9])")
KVLM_NAME = re.compile(r"\b(KVLM_[A-Z0-9_]*[A-Z0-9])\b")
CODE_SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*)`")


def repo_files(root):
    """Every file of the repository, as a path relative to ROOT."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build"))
        out += [os.path.relpath(os.path.join(d, f), root) for f in files]
    return sorted(out)


def expand_braces(word):
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    return [w for alt in m.group(1).split(",")
            for w in expand_braces(word[:m.start()] + alt + word[m.end():])]


def doc_text(path):
    """(line, text, in_code) of each stretch of a document: each code-block
    line alone (with its continuation lines), and each run of prose lines
    joined, so a `code span` that wraps a line is read whole."""
    lines = read_lines(path)
    out, prose, start, in_code = [], [], 1, False
    joined = None  # a code line that ends in a backslash, and its line number
    for i, line in enumerate(lines, 1):
        if joined:
            line, i = joined[1][:-1] + " " + line.strip(), joined[0]
            joined = None
        if in_code and line.endswith("\\"):
            joined = (i, line)
            continue
        fence = line.lstrip().startswith(("```", "~~~"))
        if in_code or fence or not line.strip():
            if prose:
                out.append((start, "\n".join(prose), False))
                prose = []
            if fence:
                in_code = not in_code
            elif in_code:
                out.append((i, line, True))
            continue
        if not prose:
            start = i
        prose.append(line)
    if prose:
        out.append((start, "\n".join(prose), False))
    return out


def cited(path):
    """(line, kind, text) of what a document cites: 'span' for each code
    span of its prose, 'link' for each link target, 'code' for each code-block
    line."""
    out = []
    for start, text, in_code in doc_text(path):
        if in_code:
            out.append((start, "code", text))
            continue
        for m in CODE_SPAN.finditer(text):
            out.append((start + text.count("\n", 0, m.start()), "span", m.group(1)))
        for m in LINK.finditer(text):
            out.append((start + text.count("\n", 0, m.start()), "link", m.group(1)))
    return out


def gtest_names(root):
    """Every gtest test the sources of tests/ declare, as Suite.Name."""
    names = set()
    decl = re.compile(r"\b(?:TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)")
    # A parametrised suite with one test, Renders (tests/unit/chat/jinja_test_util.h).
    jinja = re.compile(r"^\s*KVLM_JINJA_RENDER_SUITE\s*\(\s*(\w+)\s*,", re.M)
    for rel in repo_files(root):
        if rel.startswith("tests" + os.sep) and rel.endswith((".cpp", ".h")):
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                text = f.read()
            names.update(f"{s}.{n}" for s, n in decl.findall(text))
            names.update(f"{s}.Renders" for s in jinja.findall(text))
    return names


def ctest_names(root):
    """The names tests/CMakeLists.txt gives its own tests (${VAR} a wildcard)."""
    path = os.path.join(root, "tests", "CMakeLists.txt")
    if not os.path.isfile(path):
        return set()
    with open(path, encoding="utf-8") as f:
        names = re.findall(r"add_test\(NAME\s+(\S+)", f.read())
    return {re.sub(r"\$\{[^}]*\}", "*", n) for n in names}


def ctest_labels(root):
    """The labels of tests/CMakeLists.txt: one per test binary (kvlm_add_test)."""
    path = os.path.join(root, "tests", "CMakeLists.txt")
    if not os.path.isfile(path):
        return set()
    with open(path, encoding="utf-8") as f:
        return set(re.findall(r"^\s*kvlm_add_test\((\w+)", f.read(), re.M))


def kvlm_help_flags(kvlm):
    """Every --flag in the --help of kvlm's commands, bench's kinds and kv's tools."""
    def help_of(args):
        r = subprocess.run([kvlm] + args + ["--help"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
        return r.stdout + r.stderr
    top = help_of([])
    commands = re.findall(r"^  ([a-z][a-z-]*)  ", top, re.M)
    if not commands:
        raise SystemExit(f"check_docs: no commands in `{kvlm} --help`:\n{top}")
    flags = set()
    for c in commands:
        text = help_of([c])
        m = re.search(rf"usage: kvlm {c} \(([a-z| -]+)\)", text)
        kinds = [k.strip() for k in m.group(1).split("|")] if m else []
        for k in kinds:
            text += help_of([c, k])
        flags.update(FLAG.findall(text))
    return flags


def script_flags(root):
    """Every "--flag" written as a string in the repository's own scripts
    (bench/, scripts/, tests/: argparse, getopt-style case labels)."""
    flags = set()
    for rel in repo_files(root):
        if rel.split(os.sep)[0] in ("bench", "scripts", "tests") and \
                rel.endswith((".py", ".sh", ".mjs", ".js")):
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                text = f.read()
            flags.update(re.findall(r"""(?:["'(|]|^\s*)(--[a-z][a-z0-9_-]*[a-z0-9])(?=[="'=)|\s])""",
                                    text, re.M))
    return flags


def source_names(root):
    """Every KVLM_ name in the repository's files other than the documents."""
    names = set()
    for path in source_files(root):
        rel = os.path.relpath(path, root)
        if rel.endswith(".md") or rel.startswith("tests" + os.sep + "docs" + os.sep):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            names.update(KVLM_NAME.findall(f.read()))
    return names


def check_cited(root, kvlm):
    root = os.path.realpath(root)
    files = repo_files(root)
    file_set = set(files)
    dirs = {os.path.dirname(f) for f in files}
    while True:  # every ancestor folder too
        more = {os.path.dirname(d) for d in dirs if os.path.dirname(d)} - dirs
        if not more:
            break
        dirs |= more
    tests = gtest_names(root)
    ctests = ctest_names(root)
    all_tests = tests | ctests
    suites = {t.split(".")[0] for t in all_tests}
    ctest_prefixes = {n.split(".")[0] for n in ctests}
    labels = ctest_labels(root)
    help_flags = kvlm_help_flags(os.path.abspath(kvlm))
    known_flags = help_flags | script_flags(root) | set(OTHER_TOOLS_FLAGS)
    kvlm_names = source_names(root)
    problems = []
    num = {"paths": 0, "tests": 0, "flags": 0, "KVLM_ names": 0}

    def path_exists(word):
        word = word.rstrip("/")
        if any(c in word for c in "*?["):
            return any(fnmatch.fnmatchcase(f, word) for f in files) or \
                any(fnmatch.fnmatchcase(d, word) for d in dirs)
        return word in file_set or word in dirs

    def ends_a_file(word):
        if any(c in word for c in "*?["):
            return any(fnmatch.fnmatchcase(f, "*" + word) or fnmatch.fnmatchcase(os.path.basename(f), word)
                       for f in files)
        return any(f == word or f.endswith("/" + word) for f in files)

    def check_path(name, word, strict):
        word = word.rstrip(".,:;")
        if not word or "<" in word or word.startswith(("../", "./")):
            return
        for w in expand_braces(word):
            first = w.split("/")[0]
            num["paths"] += first in TOP_DIRS or (strict and w.endswith(SOURCE_SUFFIXES))
            if first in TOP_DIRS:
                if not path_exists(w):
                    problems.append(f"{name}: no such file or folder in the repository: {w}")
            elif strict and w.endswith(SOURCE_SUFFIXES) and w not in NOT_REPO_FILES and not ends_a_file(w):
                problems.append(f"{name}: no file of the repository is {w}")

    def test_matches(pattern):
        return any(fnmatch.fnmatchcase(t, pattern) or fnmatch.fnmatchcase(pattern, t) for t in all_tests)

    def check_test(name, suite, test):
        if suite[0].islower() and suite not in ctest_prefixes:
            return  # file.ext, object.member: not a test
        num["tests"] += 1
        if test == "*":
            if suite not in suites and not any(fnmatch.fnmatchcase(suite, s.split(".")[0]) for s in ctests):
                problems.append(f"{name}: no test suite {suite} in tests/")
        elif not test_matches(f"{suite}.{test}"):
            problems.append(f"{name}: no test {suite}.{test} in tests/")

    def check_flag(name, flag):
        num["flags"] += 1
        if flag not in known_flags:
            problems.append(f"{name}: --flag in no kvlm command's --help nor a script of the "
                            f"repository: {flag}")

    def check_kvlm_names(name, text):
        for n in KVLM_NAME.findall(text):
            num["KVLM_ names"] += 1
            if n not in kvlm_names:
                problems.append(f"{name}: {n} appears nowhere in the code")

    for doc in doc_files(root):
        rel = os.path.relpath(doc, root)
        for lineno, kind, text in cited(doc):
            name = f"{rel}:{lineno}"
            if kind == "link":
                continue  # check_links resolves links
            if kind == "code":
                line = re.sub(r"^\s*\$\s+", "", text)
                for m in re.finditer(r"--gtest_filter=['\"]?([^'\"\s]+)", line):
                    for pat in m.group(1).lstrip("-").split(":"):
                        num["tests"] += pat != ""
                        if pat and not test_matches(pat):
                            problems.append(f"{name}: --gtest_filter matches no test in tests/: {pat}")
                if re.search(r"\bctest\b", line):
                    for m in re.finditer(r"\s-R\s+(?:'([^']*)'|\"([^\"]*)\"|(\S+))", line):
                        regex = next(g for g in m.groups() if g is not None)
                        for alt in re.sub(r"^\^?\(|\)\$?$", "", regex).split("|"):
                            num["tests"] += 1
                            if not any(re.search(alt, t.replace("*", "x")) for t in all_tests):
                                problems.append(f"{name}: ctest -R matches no test: {alt}")
                    for m in re.finditer(r"\s-L\s+(?:'([^']*)'|\"([^\"]*)\"|(\S+))", line):
                        regex = next(g for g in m.groups() if g is not None)
                        if m.group(3) and regex.count(")") > regex.count("("):
                            regex = regex.rstrip(")")  # (cd build && ctest -L X)
                        num["tests"] += 1
                        if not any(re.search(regex, label) for label in labels):
                            problems.append(f"{name}: ctest -L matches no test binary's label: {regex}")
                for w in line.split():
                    w = w.strip("'\"();")
                    if w.split("/")[0] in TOP_DIRS and w.endswith(SCRIPT_SUFFIXES):
                        check_path(name, w, False)
                # The flags of build/kvlm lines are check_commands' (per command).
                if re.match(r"\s*(?:[A-Za-z_]\w*=\S*\s+)*(?:bench/|scripts/|python3 )", line):
                    for flag in FLAG.findall(line):
                        check_flag(name, flag)
                check_kvlm_names(name, line)
                continue
            for m in PATH_WORD.finditer(text):
                check_path(name, m.group(1), True)
            if "/" not in text and " " not in text.strip():
                m = BARE_FILE.fullmatch(text.strip())
                if m:
                    check_path(name, m.group(1), True)
            for m in TEST_NAME.finditer(text):
                check_test(name, m.group(1), m.group(2))
            for flag in FLAG.findall(text):
                check_flag(name, flag)
            check_kvlm_names(name, text)
    print("check_docs: cited " + ", ".join(f"{v} {k}" for k, v in num.items()), file=sys.stderr)
    for kind in ("paths", "tests", "flags"):
        if num[kind] == 0:
            problems.append(f"no {kind} cited in README.md and docs/*.md: is the extraction broken?")
    return problems


def selftest(kvlm):
    """Every check on a scratch repository: each good citation passes and
    each bad one is reported, once, on its line."""
    def write(root, rel, text):
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as f:
            f.write(text)

    with tempfile.TemporaryDirectory() as root:
        write(root, "src/kv/block_pool.h", "// KVLM_REAL_KNOB\n")
        write(root, "tests/unit/kv/block_pool_test.cpp", "TEST(BlockPool, Allocates) {}\n")
        write(root, "tests/CMakeLists.txt", "kvlm_add_test(kvlm_unit_kv unit/kv)\n"
                                            "add_test(NAME docs.Selftest COMMAND true)\n")
        write(root, "bench/ab.py", "p.add_argument('--rounds')\n")
        write(root, "docs/x.md", "# x\n\nThe kit: `../shared" + "/bench/membw.c`.\n")
        write(root, "src/kv/note.h", "// As issue" + " 47 asked.\n")
        write(root, "README.md", "\n".join([
            "# t",
            "",
            "See [the design](" + SHARED_DOCS + "/x.md) and [here](#t).",
            "",
            "```sh",
            "build/kvlm run -m MODEL.gguf -p \"a | b\" -n 4 2>&1 | head  # fine",
            "build/kvlm serve -m M.gguf \\",
            "    --no-such-flag 3 &",
            "bench/ab.py --rounds 3; bench/gone.py",
            "build/tests/kvlm_unit_kv --gtest_filter='BlockPool.*:Gone.*'",
            "ctest --test-dir build -R '^(BlockPool|docs\\.|NoSuchSuite)' -L kvlm_unit_kv -L kvlm_unit_gone",
            "```",
            "",
            "Good: `src/kv/block_pool.h`, `kv/block_pool.h`, `block_pool_test.cpp`, `tests/unit/`,",
            "`BlockPool.Allocates`, `BlockPool.*`, `docs.Selftest`, `--kv-type q8_0`, `--rounds`,",
            "`KVLM_REAL_KNOB`, `../shared/models/m.gguf`, `snake_case.h`.",
            "",
            "Bad: `src/kv/gone.h` and `gone.cpp`,",
            "`BlockPool.Frees` and",
            "`--no-such-doc-flag`, `KVLM_NO_SUCH_KNOB`.",
            ""]))
        expected = [  # (check, the problem's start, a word it names)
            ("links", "README.md:3:", SHARED_DOCS), ("links", "README.md:3:", "link leaves"),
            ("links", "docs/x.md:3:", "shared/bench"), ("links", "src/kv/note.h:1:", "issue number"),
            ("commands", "README.md:7:", "does not parse"),
            ("cited", "README.md:9:", "bench/gone.py"),
            ("cited", "README.md:10:", "Gone.*"),
            ("cited", "README.md:11:", "NoSuchSuite"), ("cited", "README.md:11:", "kvlm_unit_gone"),
            ("cited", "README.md:18:", "src/kv/gone.h"), ("cited", "README.md:18:", "gone.cpp"),
            ("cited", "README.md:19:", "BlockPool.Frees"),
            ("cited", "README.md:20:", "--no-such-doc-flag"), ("cited", "README.md:20:", "KVLM_NO_SUCH_KNOB"),
        ]
        got = [("links", p) for p in check_links(root)]
        got += [("commands", p) for p in check_commands(root, kvlm, min_lines=2)]
        got += [("cited", p) for p in check_cited(root, kvlm)]
        missing = [e for e in expected
                   if not any(c == e[0] and p.startswith(e[1]) and e[2] in p for c, p in got)]
        if missing or len(got) != len(expected):
            print("selftest: expected\n  " + "\n  ".join(f"{c}: {w} ... {x}" for c, w, x in expected) +
                  "\ngot:\n  " + "\n  ".join(f"{c}: {p}" for c, p in got), file=sys.stderr)
            return 1
    print("selftest: every check reports what it must, and only that", file=sys.stderr)
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "links":
        problems = check_links(argv[2])
    elif len(argv) >= 4 and argv[1] == "commands":
        problems = check_commands(argv[2], argv[3], int(argv[4]) if len(argv) > 4 else 10)
    elif len(argv) == 4 and argv[1] == "cited":
        problems = check_cited(argv[2], argv[3])
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
