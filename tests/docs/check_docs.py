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

3. The reference cannot drift from the binary, the schema or the source (docs/reference/):
   a. CLI: every long flag in the option list of `idem SUB --help` is the first cell of a table
      row of SUB's reference (cli-SUB.md, else the `## idem SUB` section of cli.md), and every
      flag such a first cell names is one --help lists or a renamed flag the binary still
      accepts (it warns "FLAG is deprecated"). Every key of deploy/config/SUB.toml appears in
      SUB's page too.
   b. SQL: every function and procedure `CREATE`d in sql/schema/*.sql is either a heading of
      the SQL reference (`### \`idem.NAME\``: for callers) or named in the first cell of a row
      of its "Functions for idem's own use" table, not both, and the pages name no function
      the schema does not create.
   c. Metrics: the metric names the source exposes (string literals `idem_...` in every file of
      src/ and tools/ that writes a `# TYPE` line, itself or through admin::WriteMetric*) are exactly the first cells of the rows of
      metrics.md, and every other `idem_*` metric name metrics.md mentions is one of them.

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


REFERENCE = os.path.join("docs", "reference")


def table_first_cells(lines):
    """(line number, first cell) of each row of the Markdown tables in `lines`, outside fences."""
    fenced = False
    for number, line in lines:
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or not line.startswith("|") or re.match(r"^\|[\s:|-]*$", line):
            continue
        cells = re.split(r"(?<!\\)\|", line)
        if len(cells) > 2:
            yield number, cells[1]


def read_numbered(path):
    with open(path, encoding="utf-8") as f:
        return list(enumerate(f.read().split("\n"), 1))


def reference_of(root, subcommand):
    """(path, numbered lines) of the reference for `subcommand`: its own page, else its section."""
    own = os.path.join(root, REFERENCE, f"cli-{subcommand}.md")
    if os.path.exists(own):
        return own, read_numbered(own)
    path = os.path.join(root, REFERENCE, "cli.md")
    lines, section = read_numbered(path), []
    inside = False
    for number, line in lines:
        if re.match(r"^##\s", line):
            inside = re.match(rf"^##\s+idem {re.escape(subcommand)}\s*$", line) is not None
            continue
        if inside:
            section.append((number, line))
    return (path, section) if section else (None, [])


def listed_flags(binary, subcommand):
    """The long flags of the option list of `idem SUBCOMMAND --help` (not those its prose names)."""
    run = subprocess.run([binary, subcommand, "--help"], capture_output=True, text=True,
                         timeout=30)
    return set(re.findall(r"^\s{1,4}(?:-\w,)?(--[a-z0-9][a-z0-9-]*)", run.stdout, re.M))


def subcommands(binary):
    run = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    return re.findall(r"^  ([a-z]+)\s", run.stdout.split("Subcommands:")[-1], re.M)


def renamed_flag(binary, subcommand, flag):
    run = subprocess.run([binary, subcommand, f"{flag}=x"], capture_output=True, text=True,
                         timeout=30)
    return f"{flag} is deprecated" in run.stderr


def config_keys(path):
    keys = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^#?\s*([a-z][a-z0-9_]*)\s*=", line)
            if m:
                keys.add(m.group(1))
    return keys


def check_cli_reference(binary, root, problems):
    names = subcommands(binary)
    if not names:
        problems.append("`idem --help` lists no subcommand")
    for sub in names:
        path, lines = reference_of(root, sub)
        if path is None:
            problems.append(f"{REFERENCE}: no cli-{sub}.md and no `## idem {sub}` in cli.md")
            continue
        where = os.path.relpath(path, root)
        documented = {}
        for number, cell in table_first_cells(lines):
            for flag in re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", cell):
                documented.setdefault(flag, number)
        known = listed_flags(binary, sub)
        for flag in sorted(known - set(documented) - {"--help"}):
            problems.append(f"{where}: `idem {sub} --help` lists {flag}, the reference does not")
        for flag, number in sorted(documented.items()):
            if flag not in known and not renamed_flag(binary, sub, flag):
                problems.append(f"{where}:{number}: `idem {sub}` has no flag {flag}")
        toml = os.path.join(root, "deploy", "config", f"{sub}.toml")
        if os.path.exists(toml):
            text = "\n".join(line for _, line in lines)
            for key in sorted(config_keys(toml)):
                if f"`{key}`" not in text:
                    problems.append(f"{where}: key `{key}` of deploy/config/{sub}.toml is not in it")


CREATED = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|PROCEDURE)\s+((?:idem\.)?\w+)\s*\(",
                     re.I)


def check_sql_reference(root, problems):
    created = set()
    for path in glob.glob(os.path.join(root, "sql", "schema", "*.sql")):
        with open(path, encoding="utf-8") as f:
            created |= set(CREATED.findall(f.read()))
    if not created:
        problems.append("sql/schema/*.sql: no CREATE FUNCTION found")
    headed, internal = {}, {}
    for path in sorted(glob.glob(os.path.join(root, REFERENCE, "sql*.md"))):
        where = os.path.relpath(path, root)
        fenced, own_use, section = False, False, []
        for number, line in read_numbered(path):
            if FENCE.match(line):
                fenced = not fenced
            heading = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*$", line)
            if heading:
                own_use = "own use" in heading.group(1)
                m = re.match(r"^`(idem\.\w+)`$", heading.group(1))
                if m:
                    headed[m.group(1)] = f"{where}:{number}"
            elif own_use:
                section.append((number, line))
        for number, cell in table_first_cells(section):
            for name in re.findall(r"`(idem_\w+|idem\.\w+)`", cell):
                internal[name] = f"{where}:{number}"
    for name in sorted(created - set(headed) - set(internal)):
        problems.append(f"{REFERENCE}/sql*.md: function {name} (sql/schema) is neither a heading "
                        f"nor in the \"own use\" table")
    for name in sorted(set(headed) & set(internal)):
        problems.append(f"{headed[name]}: {name} is both for callers and for idem's own use")
    for name, where in sorted({**internal, **headed}.items()):
        if name not in created:
            problems.append(f"{where}: {name}: no such function in sql/schema/*.sql")
    return len(headed)


def source_metrics(root):
    names, files = set(), 0
    for folder in ("src", "tools"):
        for path in glob.glob(os.path.join(root, folder, "**", "*.cc"), recursive=True):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            # A file exposes metrics when it writes `# TYPE` lines itself, or through the
            # admin module's writers (admin/metric_text.h).
            if "# TYPE" not in text and "WriteMetric" not in text:
                continue
            files += 1
            for literal in re.findall(r'"((?:[^"\\\n]|\\.)*)"', text):
                names |= set(re.findall(r"\bidem_[a-z0-9_]*[a-z0-9]", literal))
    histograms = {n[:-len("_bucket")] for n in names if n.endswith("_bucket")}
    names = {n for n in names
             if not any(n == h + s for h in histograms for s in ("_bucket", "_sum", "_count"))}
    return names, files


def check_metrics_reference(root, problems):
    names, files = source_metrics(root)
    if files < 4 or not names:
        problems.append(f"metrics: only {files} source file(s) write `# TYPE`, naming "
                        f"{len(names)} metric(s): has the exposition code moved?")
    path = os.path.join(root, REFERENCE, "metrics.md")
    where = os.path.relpath(path, root)
    lines = read_numbered(path)
    rows = {}
    for number, cell in table_first_cells(lines):
        for name in re.findall(r"`(idem_[a-z0-9_]+)", cell):
            rows.setdefault(name, number)
    for name in sorted(names - set(rows)):
        problems.append(f"{where}: metric {name} (exposed by the source) has no row")
    for number, line in lines:
        for name in re.findall(r"\bidem_(?:gateway|relay|consume|sweep)_[a-z0-9_]*[a-z0-9]|\bidem_ready\b",
                               line):
            if name not in names:
                problems.append(f"{where}:{number}: metric {name} is not exposed by the source")
    return len(names)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, root = sys.argv[1], os.path.abspath(sys.argv[2])
    problems = []
    check_links(root, problems)
    checked = check_commands(binary, root, problems)
    check_cli_reference(binary, root, problems)
    functions = check_sql_reference(root, problems)
    metrics = check_metrics_reference(root, problems)
    for p in problems:
        print(p)
    print(f"check_docs: {len(markdown_files(root))} Markdown files, {checked} command lines, "
          f"{functions} SQL functions for callers, {metrics} metrics, {len(problems)} problem(s)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
