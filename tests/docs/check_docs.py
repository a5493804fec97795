#!/usr/bin/env python3
"""The docs cannot drift from the tree or the command line.

  check_docs.py IDEM_BINARY SOURCE_DIR

1. Every relative link in the Markdown files (README.md, docs/, sql/, deploy/, examples/) names
   a file or folder that exists, and its #anchor, when it has one, a heading of that file
   (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens, -1, -2... for repeats).
2. Every command line that starts with `idem` in a fenced block of the README and the guides
   (docs/guides/) names a subcommand the binary has and only flags that subcommand's --help
   lists; a complete daemon command line (no [optional] parts) must also pass the daemon's own
   --check-config, which parses and checks everything without connecting anywhere.

Prints each problem with its file and line; exit 1 if there is any.
"""
import glob
import os
import re
import shlex
import subprocess
import sys

DAEMONS = {"gateway", "relay", "consume", "sweep"}
# Stand-ins for the shell variables the docs use in command lines.
VARIABLES = {"DB": "postgresql://idem@127.0.0.1:5432/app", "NATS": "nats://127.0.0.1:4222"}
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*```")


def slug(heading):
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, result, fenced = {}, set(), False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if not m:
                    continue
                base = slug(m.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                result.add(base if n == 0 else f"{base}-{n}")
        cache[path] = result
    return cache[path]


def markdown_files(root):
    files = [os.path.join(root, "README.md")]
    for folder in ("docs", "sql", "deploy", "examples"):
        files += glob.glob(os.path.join(root, folder, "**", "*.md"), recursive=True)
    return sorted(f for f in files if os.path.isfile(f) and "node_modules" not in f)


def check_links(root, problems):
    for path in markdown_files(root):
        fenced = False
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if FENCE.match(line):
                    fenced = not fenced
                if fenced:
                    continue
                for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                        continue  # http:, https:, mailto:, file:
                    file_part, _, anchor = target.partition("#")
                    where = f"{os.path.relpath(path, root)}:{number}"
                    linked = os.path.normpath(
                        os.path.join(os.path.dirname(path), file_part)) if file_part else path
                    if not os.path.exists(linked):
                        problems.append(f"{where}: link to {target}: no such file")
                        continue
                    if anchor and linked.endswith(".md") and anchor not in anchors(linked):
                        problems.append(f"{where}: link to {target}: no heading #{anchor}")


def command_lines(path):
    """(line number, text) of each `idem ...` line in the fenced blocks, continuations joined."""
    fenced, pending, start = False, None, 0
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            if FENCE.match(raw):
                fenced, pending = not fenced, None
                continue
            if not fenced:
                continue
            line = raw.rstrip("\n")
            if pending is not None:
                pending += " " + line.strip()
            else:
                stripped = re.sub(r"^\s*(\$\s+|sudo\s+)", "", line)
                if not stripped.startswith("idem "):
                    continue
                pending, start = stripped, number
            if pending.endswith("\\"):
                pending = pending[:-1]
                continue
            yield start, pending
            pending = None


def help_flags(binary, subcommand, cache={}):
    if subcommand not in cache:
        run = subprocess.run([binary, subcommand, "--help"], capture_output=True, text=True,
                             timeout=30)
        cache[subcommand] = (run.returncode,
                             set(re.findall(r"--[a-z0-9][a-z0-9-]*", run.stdout + run.stderr)))
    return cache[subcommand]


def check_commands(binary, root, problems):
    files = [os.path.join(root, "README.md")] + sorted(
        glob.glob(os.path.join(root, "docs", "guides", "*.md")))
    checked = 0
    for path in files:
        for number, text in command_lines(path):
            where = f"{os.path.relpath(path, root)}:{number}"
            try:
                words = shlex.split(text, comments=True)
            except ValueError as e:
                problems.append(f"{where}: cannot read `{text}`: {e}")
                continue
            if len(words) < 2 or words[1].endswith(":"):
                continue  # printed output ("idem chaos: seed 7, ..."), not a command
            subcommand = words[1]
            checked += 1
            if subcommand.startswith("-"):
                run = subprocess.run([binary] + words[1:], capture_output=True, timeout=30)
                if run.returncode != 0:
                    problems.append(f"{where}: `{text}` exits {run.returncode}")
                continue
            code, flags = help_flags(binary, subcommand)
            if code != 0:
                problems.append(f"{where}: `idem {subcommand}`: no such subcommand")
                continue
            used = {w.split("=", 1)[0] for w in re.findall(r"--[a-z0-9][a-z0-9=-]*", text)}
            for flag in sorted(used - flags - {"--help"}):
                problems.append(f"{where}: `idem {subcommand}` has no flag {flag}")
            synopsis = re.search(r"\[|\.\.\.|\|", text) or re.search(r"\b[A-Z]{2,}\b", text)
            if subcommand in DAEMONS and not synopsis:
                args = [re.sub(r"\$\{?(\w+)\}?", lambda m: VARIABLES.get(m.group(1), m.group(0)),
                               w) for w in words[2:]]
                run = subprocess.run([binary, subcommand] + args + ["--check-config"],
                                     capture_output=True, text=True, timeout=30)
                if run.returncode != 0:
                    problems.append(f"{where}: `{text}` fails --check-config: "
                                    f"{(run.stdout + run.stderr).strip()}")
    return checked


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, root = sys.argv[1], os.path.abspath(sys.argv[2])
    problems = []
    check_links(root, problems)
    checked = check_commands(binary, root, problems)
    for p in problems:
        print(p)
    print(f"check_docs: {len(markdown_files(root))} Markdown files, {checked} command lines, "
          f"{len(problems)} problem(s)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
