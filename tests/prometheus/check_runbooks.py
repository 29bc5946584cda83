#!/usr/bin/env python3
"""Every alert of a rules file has a summary and a runbook_url whose anchor is
a heading of the runbook page (docs/operating.md), as GitHub makes anchors:
lower case, punctuation but '-' and '_' dropped, spaces to '-'.

    check_runbooks.py RULES.yml RUNBOOK.md      exit 0 ok, 1 a problem
The rules file is read without a YAML library (Debian's python3 has none by
default): the alert, summary and runbook_url lines of the shipped layout.
"""
import re
import sys


def anchors(md):
    out = set()
    fence = False
    for line in md.splitlines():
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"#{1,6}\s+(.*)", line)
        if m:
            text = re.sub(r"[`*]", "", m.group(1)).strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out


def main():
    rules, runbook = sys.argv[1:3]
    have = anchors(open(runbook, encoding="utf-8").read())
    alerts, problems = {}, []
    name = None
    for line in open(rules, encoding="utf-8"):
        m = re.match(r"\s*- alert:\s*(\S+)", line)
        if m:
            name = m.group(1)
            alerts[name] = {}
            continue
        m = re.match(r"\s*(summary|runbook_url):\s*\"?(.*?)\"?\s*$", line)
        if m and name:
            alerts[name][m.group(1)] = m.group(2)
    if not alerts:
        problems.append("%s: no alerts found" % rules)
    for name, a in alerts.items():
        if not a.get("summary"):
            problems.append("%s: no summary" % name)
        url = a.get("runbook_url", "")
        anchor = url.partition("#")[2]
        if not url.split("#")[0].endswith("operating.md") or not anchor:
            problems.append("%s: runbook_url %r is not a docs/operating.md section" % (name, url))
        elif anchor not in have:
            problems.append("%s: runbook_url anchor #%s is no heading of %s" % (name, anchor, runbook))
    for p in problems:
        print("FAIL: " + p)
    if not problems:
        print("ok: %d alerts, each with a summary and a runbook section" % len(alerts))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
