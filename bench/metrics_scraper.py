#!/usr/bin/python3
"""Scrapes every role of a running job once a second, timing each scrape (bench/metrics.sh).

Usage: metrics_scraper.py DASHBOARD_URL OUT.json

Finds the roles through the scheduler's service discovery (DASHBOARD_URL/api/targets), GETs each
/metrics, and, once the scheduler stops answering (the job is over), writes
{role: [[seconds, body_bytes], ...]} to OUT.json.
"""

import json
import sys
import time
import urllib.request


def main():
    base, out = sys.argv[1], sys.argv[2]
    latencies = {}
    seen_scheduler = False
    misses = 0
    while misses < 10:
        started = time.time()
        try:
            with urllib.request.urlopen(base + "/api/targets", timeout=2) as r:
                groups = json.load(r)
            seen_scheduler, misses = True, 0
        except OSError:
            # Before the scheduler listens, or after the job: give up after 10 misses in a row
            # once it has been seen (or 60 before).
            misses += 1 if seen_scheduler else 1 / 6
            time.sleep(0.5)
            continue
        for group in groups:
            role = group["labels"].get("role", "?")
            for target in group["targets"]:
                t0 = time.perf_counter()
                try:
                    with urllib.request.urlopen(f"http://{target}/metrics", timeout=2) as r:
                        size = len(r.read())
                except OSError:
                    continue
                latencies.setdefault(role, []).append([time.perf_counter() - t0, size])
        time.sleep(max(0.0, 1.0 - (time.time() - started)))
    with open(out, "w") as f:
        json.dump(latencies, f)


if __name__ == "__main__":
    main()
