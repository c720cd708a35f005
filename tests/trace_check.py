#!/usr/bin/env python3
"""trace_check.py — validates a Chrome trace that `headroom train --trace`
wrote, against the trace-event format (the "JSON Object Format") and against
the step it traced. Needs only the standard library.

    python3 tests/trace_check.py TRACE.json [--steps N] [--schedule-nodes N]
                                 [--device] [--complete]

Checks: the file is JSON, an object with a traceEvents list; every event has
name, ph, pid, tid and ts (and dur for "X"), numbers >= 0; ph is X, C or M;
each pid that events use has one process_name and each (pid, tid) one
thread_name; on each track the timestamps never run backwards and complete
events do not overlap; counters carry numbers. Then headroom's own facts:
each step event covers as many node events (a group launch counts its nodes)
as its args say, and a complete step as many as the schedule runs a step
(pass nodes x accumulate + update nodes); --schedule-nodes N: the schedule's
length (`headroom plan --eval-batch 0 --json`'s "steps") equals the trace's;
--steps N: N steps traced; --device: node times from a device track;
--complete: every step complete. Prints one line OK with the counts, or each
failure; exit status 0 only when all hold."""
import json
import sys

EPS = 1e-3  # microseconds: the writer rounds to whole nanoseconds


def check(path, want_steps=None, schedule=None, device=False, complete=False):
    errs = []

    def fail(msg):
        if len(errs) < 20:
            errs.append(msg)

    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        return [f"{path}: not JSON: {e}"], None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return [f"{path}: not an object with a traceEvents list"], None
    evs = doc["traceEvents"]
    if doc.get("displayTimeUnit") not in (None, "ms", "ns"):
        fail(f"displayTimeUnit {doc.get('displayTimeUnit')!r} is neither ms nor ns")
    num = (int, float)
    pnames, tnames, used_pid, used_track = {}, {}, set(), set()
    tracks = {}
    for i, e in enumerate(evs):
        if not isinstance(e, dict):
            fail(f"event {i} is not an object")
            continue
        miss = [k for k in ("name", "ph", "pid", "tid", "ts") if k not in e]
        if e.get("ph") == "X" and "dur" not in e:
            miss.append("dur")
        if miss:
            fail(f"event {i} ({e.get('name')!r}) lacks {', '.join(miss)}")
            continue
        if not isinstance(e["name"], str) or not isinstance(e["pid"], int) or not isinstance(e["tid"], int):
            fail(f"event {i}: name must be a string, pid and tid integers")
            continue
        if not isinstance(e["ts"], num) or e["ts"] < 0 or (e["ph"] == "X" and (not isinstance(e["dur"], num) or e["dur"] < 0)):
            fail(f"event {i} ({e['name']}): ts and dur must be numbers >= 0")
            continue
        ph, key = e["ph"], (e["pid"], e["tid"])
        if ph == "M":
            a = e.get("args", {})
            if e["name"] == "process_name":
                pnames[e["pid"]] = pnames.get(e["pid"], 0) + 1
            elif e["name"] == "thread_name":
                tnames[key] = tnames.get(key, 0) + 1
            elif e["name"] not in ("process_sort_index", "thread_sort_index"):
                fail(f"event {i}: unknown metadata {e['name']!r}")
            if e["name"].endswith("_name") and not isinstance(a.get("name"), str):
                fail(f"event {i}: {e['name']} without a string args.name")
            continue
        if ph not in ("X", "C"):
            fail(f"event {i} ({e['name']}): phase {ph!r} (headroom writes X, C and M)")
            continue
        if ph == "C" and (not isinstance(e.get("args"), dict) or not e["args"]
                          or not all(isinstance(v, num) for v in e["args"].values())):
            fail(f"event {i} ({e['name']}): a counter needs numeric args")
        used_pid.add(e["pid"])
        used_track.add(key)
        tracks.setdefault(key, []).append(e)
    for p in sorted(used_pid):
        if pnames.get(p, 0) != 1:
            fail(f"pid {p}: {pnames.get(p, 0)} process_name events (want 1)")
    for k in sorted(used_track):
        if tnames.get(k, 0) != 1:
            fail(f"pid {k[0]} tid {k[1]}: {tnames.get(k, 0)} thread_name events (want 1)")
    # per track: timestamps in order, complete events apart
    for k, lst in tracks.items():
        last_ts, last_end, last_name = -1.0, -1.0, None
        for e in lst:
            if e["ts"] + EPS < last_ts:
                fail(f"pid {k[0]} tid {k[1]}: {e['name']} at {e['ts']} runs back before {last_ts}")
            if e["ph"] == "X":
                if e["ts"] + EPS < last_end:
                    fail(f"pid {k[0]} tid {k[1]}: {e['name']} at {e['ts']} overlaps {last_name} (ends {last_end})")
                last_end, last_name = e["ts"] + e["dur"], e["name"]
            last_ts = e["ts"]
    if errs:
        return errs, None

    # ---- headroom's own facts --------------------------------------------------
    od = doc.get("otherData", {})
    for k in ("schedule_nodes", "pass_nodes", "update_nodes", "accumulate", "steps_traced"):
        if not isinstance(od.get(k), int):
            fail(f"otherData.{k} missing")
    if errs:
        return errs, None
    per_step = od["pass_nodes"] * od["accumulate"] + od["update_nodes"]
    if od["pass_nodes"] + od["update_nodes"] != od["schedule_nodes"]:
        fail(f"pass nodes {od['pass_nodes']} + update nodes {od['update_nodes']} != schedule {od['schedule_nodes']}")
    if schedule is not None and od["schedule_nodes"] != schedule:
        fail(f"the trace's schedule has {od['schedule_nodes']} nodes, the plan {schedule}")
    names = {k: n for k, n in ((k, None) for k in used_track)}
    for e in evs:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    step_tracks = [k for k, n in names.items() if n == "steps"]
    dev_tracks = [k for k, n in names.items() if n and "(device time)" in n]
    host_tracks = [k for k, n in names.items() if n and ("(host time)" in n or "launches (host)" in n)]
    if device and not dev_tracks:
        fail("no device track (--device)")
    node_tracks = dev_tracks if dev_tracks else host_tracks
    steps = [e for k in step_tracks for e in tracks.get(k, []) if e["ph"] == "X"]
    nodes = [e for k in node_tracks for e in tracks.get(k, []) if e["ph"] == "X"]
    if want_steps is not None and len(steps) != want_steps:
        fail(f"{len(steps)} steps traced, want {want_steps}")
    if len(steps) != od["steps_traced"]:
        fail(f"{len(steps)} step events, otherData says {od['steps_traced']}")
    counted = 0
    for s in steps:
        lo, hi = s["ts"] - EPS, s["ts"] + s["dur"] + EPS
        inside = [e for e in nodes if lo <= e["ts"] and e["ts"] + e["dur"] <= hi]
        n = 0
        for e in inside:
            a = e.get("args", {})
            if not all(k in a for k in ("node", "op", "layer", "nodes")):
                fail(f"{e['name']}: args lack node, op, layer or nodes")
            n += a.get("nodes", 1)
        counted += n
        sa = s.get("args", {})
        if sa.get("nodes") != n:
            fail(f"{s['name']}: {n} node events in it, its args say {sa.get('nodes')}")
        if sa.get("complete") and n != per_step:
            fail(f"{s['name']}: complete with {n} nodes, the schedule runs {per_step} a step")
        if complete and not sa.get("complete"):
            fail(f"{s['name']}: not complete ({n} of {per_step} nodes)")
    if counted != sum(e.get("args", {}).get("nodes", 1) for e in nodes):
        fail("node events outside every step")
    arena = od.get("arena_bytes")
    planned = [e["args"].get("bytes", 0) for e in evs if e.get("ph") == "C" and "planned" in e.get("name", "")]
    if nodes and not planned:
        fail("no planned-memory counter")
    elif planned and isinstance(arena, int) and max(planned) > arena:
        fail(f"planned live bytes {max(planned)} exceed the arena {arena}")
    return errs, (len(evs), len(steps), counted, per_step, len(used_track))


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    path, opts = argv[0], argv[1:]
    kw = {}
    i = 0
    while i < len(opts):
        o = opts[i]
        if o in ("--steps", "--schedule-nodes") and i + 1 < len(opts):
            kw["want_steps" if o == "--steps" else "schedule"] = int(opts[i + 1])
            i += 2
        elif o in ("--device", "--complete"):
            kw[o[2:]] = True
            i += 1
        else:
            print(f"trace_check: unknown option {o}", file=sys.stderr)
            return 2
    errs, counts = check(path, **kw)
    if errs:
        for e in errs:
            print(f"FAIL {e}")
        return 1
    n, steps, counted, per, ntracks = counts
    print(f"OK {path}: {n} events on {ntracks} tracks, {steps} steps, {counted} node runs ({per} a step)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
