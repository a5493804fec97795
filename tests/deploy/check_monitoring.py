#!/usr/bin/env python3
"""Checks the alert rules (deploy/prometheus/idem-alerts.yml) and the Grafana dashboard
(deploy/grafana/idem-dashboard.json) against the rest of the project.

  check_monitoring.py static SOURCE_DIR
      every alert has a unit test in deploy/prometheus/tests/ that expects it to fire, and a
      runbook section in docs/operations.md its runbook_url points at; the dashboard is valid
      JSON whose every query is valid PromQL (written as recording rules, checked by promtool).

  check_monitoring.py metrics SOURCE_DIR SCRAPE...
      every idem_* metric the rules and the dashboard name is in one of the SCRAPE files (the
      /metrics text of live daemons), with every label and label value they select on or group
      by.

Exits 1 with one line per problem.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

# Labels Prometheus adds to every series it scrapes (target labels) or that belong to a
# histogram's buckets; the daemons do not export them.
TARGET_LABELS = {"job", "instance", "le"}
DASHBOARD_VARIABLES = {"$__rate_interval": "5m", "$gateway_job": "idem-gateway",
                       "$relay_job": "idem-relay", "$consume_job": "idem-consume"}


def load(source_dir):
    with open(os.path.join(source_dir, "deploy/prometheus/idem-alerts.yml")) as f:
        rules = yaml.safe_load(f)
    with open(os.path.join(source_dir, "deploy/grafana/idem-dashboard.json")) as f:
        dashboard = json.load(f)
    return rules, dashboard


def alerts(rules):
    return [r for g in rules["groups"] for r in g["rules"] if "alert" in r]


def dashboard_exprs(dashboard):
    exprs = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in DASHBOARD_VARIABLES.items():
                expr = expr.replace(variable, value)
            exprs.append((panel["title"], expr))
    return exprs


def check_static(source_dir):
    problems = []
    rules, dashboard = load(source_dir)
    fired = set()
    tests_dir = os.path.join(source_dir, "deploy/prometheus/tests")
    for name in sorted(os.listdir(tests_dir)):
        if not name.endswith(".yml"):
            continue
        with open(os.path.join(tests_dir, name)) as f:
            for test in yaml.safe_load(f)["tests"]:
                for case in test.get("alert_rule_test", []):
                    if case.get("exp_alerts"):
                        fired.add(case["alertname"])
    with open(os.path.join(source_dir, "docs/operations.md")) as f:
        anchors = {re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                   for line in f if line.startswith("#")}
    for alert in alerts(rules):
        name = alert["alert"]
        if name not in fired:
            problems.append(f"alert {name}: no unit test in deploy/prometheus/tests expects it to fire")
        url = alert.get("annotations", {}).get("runbook_url", "")
        if not url.startswith("docs/operations.md#"):
            problems.append(f"alert {name}: runbook_url {url!r} is not a section of docs/operations.md")
        elif url.split("#", 1)[1] not in anchors:
            problems.append(f"alert {name}: docs/operations.md has no section #{url.split('#', 1)[1]}")
    exprs = dashboard_exprs(dashboard)
    if not exprs:
        problems.append("the dashboard has no queries")
    # promtool parses each dashboard query as a recording rule's expression.
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
            {"record": f"dashboard:query_{i}", "expr": e} for i, (_, e) in enumerate(exprs)]}]}, f)
        f.flush()
        run = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
        if run.returncode != 0:
            problems.append("dashboard queries that are not valid PromQL:\n" + run.stdout + run.stderr)
    return problems


SELECTOR = re.compile(r"\b(idem_[a-z0-9_]+)\s*(\{[^}]*\})?")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def parse_scrapes(paths):
    """{metric sample name: {label: {values}}} from Prometheus text files."""
    series = {}
    sample = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s")
    for path in paths:
        with open(path) as f:
            for line in f:
                m = sample.match(line)
                if not m or line.startswith("#"):
                    continue
                labels = series.setdefault(m.group(1), {})
                for label, _, value in MATCHER.findall(m.group(3) or ""):
                    labels.setdefault(label, set()).add(value)
    return series


def check_metrics(source_dir, scrapes):
    problems = []
    rules, dashboard = load(source_dir)
    series = parse_scrapes(scrapes)
    exprs = [(f"alert {a['alert']}", a["expr"]) for a in alerts(rules)]
    exprs += [(f"dashboard panel {title!r}", e) for title, e in dashboard_exprs(dashboard)]
    for where, expr in exprs:
        names = []
        for name, matchers in SELECTOR.findall(expr):
            names.append(name)
            if name not in series:
                problems.append(f"{where}: no daemon exports {name}")
                continue
            for label, op, value in MATCHER.findall(matchers):
                if label in TARGET_LABELS:
                    continue
                values = series[name].get(label)
                if values is None:
                    problems.append(f"{where}: {name} has no label {label}")
                elif op == "=" and value not in values:
                    problems.append(f"{where}: {name}{{{label}}} never has the value {value!r} "
                                    f"(it has {sorted(values)})")
                elif op == "=~" and re.fullmatch(r"[a-z0-9_|]+", value):
                    for alternative in value.split("|"):
                        if alternative not in values:
                            problems.append(f"{where}: {name}{{{label}}} never has the value "
                                            f"{alternative!r} (it has {sorted(values)})")
        for grouping in GROUPING.findall(expr):
            for label in (l.strip() for l in grouping.split(",")):
                if label and label not in TARGET_LABELS and not any(
                        label in series.get(n, {}) for n in names):
                    problems.append(f"{where}: groups by {label}, which none of {names} has")
    return problems


def main(argv):
    if len(argv) >= 3 and argv[1] == "static":
        problems = check_static(argv[2])
    elif len(argv) >= 4 and argv[1] == "metrics":
        problems = check_metrics(argv[2], argv[3:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"check_monitoring {argv[1]}: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
