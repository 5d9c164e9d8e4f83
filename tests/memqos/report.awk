#!/usr/bin/awk -f
# Tables and verdict of the memory-protection guest (run-memqos-guest.sh), from its console.
# Exit 0 only when:
#   - every "cold" run of C kept >= 90% of the LS working set and every one of A kept <= 50%;
#   - every "hot" run of C kept >= 90% (A and B are reported, never asserted);
#   - the throttled BE pod hit memory.high (events high > 0), peaked at most 2 MiB above it (the
#     kernel reclaims down to memory.high on the way back to user space, after the charge, so
#     a charge batch and the read-ahead in flight can overshoot), never reached memory.max, and
#     the LS lost nothing meanwhile;
#   - every configuration ran (RUNS cold runs each) and the throttle phase reported.
# Pass -v configs=ABC -v runs=3 -v hot_runs=1.

function kv(line, key,   m) {
    if (match(line, "(^| )" key "=[^ ]*")) {
        m = substr(line, RSTART, RLENGTH); sub(/^ /, "", m); sub(/^[^=]*=/, "", m); return m
    }
    return ""
}
function mib(bytes) { return sprintf("%.0f", bytes / 1048576) }
# nearest-rank percentile q of a[1..n], in ms (the values are µs); sorts a in place
function pct(a, n, q,   i, j, t, k) {
    if (n == 0) return "-"
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    k = int(q * n + 0.999999); if (k < 1) k = 1
    return sprintf("%.0f", a[k] / 1000)
}
function fail(msg) { bad = 1; fails = fails "\n  " msg }

/^RESULT run / { runrow[$3, $4, $5] = $0 }
/^RESULT lat / {
    k = $3 SUBSEP $4 SUBSEP $6
    lat[k, ++nlat[k]] = $7
    rk = $3 SUBSEP $4 SUBSEP $5 SUBSEP $6
    rlat[rk, ++nrlat[rk]] = $7
}
/^RESULT throttle / { throttle = $0 }
/^RESULT redis [A-C] (GET|SET) / { redis[$3, $4] = $0; if (!($3 in redis_seen)) nredis++; redis_seen[$3] = 1 }
/^RESULT redis [A-C] lsstat / { redis_stat[$3] = $0 }

END {
    name["A"] = "A no QoS"; name["B"] = "B pod level only"; name["C"] = "C full QoS"
    nprof = split("cold hot", profs, " ")
    want["cold"] = runs + 0; want["hot"] = hot_runs + 0
    ncfg = split(configs, cf, "")
    for (pi = 1; pi <= nprof; pi++) {
        prof = profs[pi]
        if (want[prof] == 0) continue
        print ""
        if (prof == "cold")
            print "Profile \"cold\": the LS read its 120 MiB working set once before the flood."
        else
            print "Profile \"hot\": the LS read its working set twice before the flood (on the active list)."
        print "kept = LS working set resident (mincore), lowest seen during the flood; refaults = workingset_refault_file"
        print "of the LS pod; read ms = one read of the whole working set (during: after each BE pass but the last)."
        print ""
        print "| config | run | kept MiB | LS memory.current MiB before -> after | refaults during / after | pgmajfault | read ms before | during | after | BE peak MiB |"
        print "|---|---|---|---|---|---|---|---|---|---|"
        for (ci = 1; ci <= ncfg; ci++) {
            cfg = cf[ci]
            nf = 0; lo = 2
            for (run = 1; run <= want[prof]; run++) {
                if (!((prof, cfg, run) in runrow)) { fail(prof " " cfg " run " run ": no result"); continue }
                l = runrow[prof, cfg, run]
                frac = kv(l, "resident_min") / kv(l, "ws_pages")
                nf++; if (frac < lo) lo = frac
                cell["before"] = ""; cell["during"] = ""; cell["after"] = ""
                for (p in cell) {
                    rk = prof SUBSEP cfg SUBSEP run SUBSEP p
                    for (i = 1; i <= nrlat[rk]; i++) cell[p] = cell[p] (i > 1 ? ", " : "") sprintf("%.0f", rlat[rk, i] / 1000)
                    if (cell[p] == "") cell[p] = "-"
                }
                printf "| %s | %d | %s (%.0f%%) | %s -> %s | %s / %s | %s / %s | %s | %s | %s | %s |\n",
                    name[cfg], run, mib(kv(l, "resident_min") * 4096), 100 * frac,
                    mib(kv(l, "current_before")), mib(kv(l, "current_end")),
                    kv(l, "refault_during"), kv(l, "refault_after"), kv(l, "pgmajfault_during"), kv(l, "pgmajfault_after"),
                    cell["before"], cell["during"], cell["after"], mib(kv(l, "be_peak"))
                if (cfg == "C" && frac < 0.90) fail(sprintf("%s C run %d kept %.0f%% of the working set (needs >= 90%%)", prof, run, 100 * frac))
                if (prof == "cold" && cfg == "A" && frac > 0.50) fail(sprintf("cold A run %d kept %.0f%% of the working set (needs <= 50%%, else the flood shows nothing)", run, 100 * frac))
            }
            summary[prof, cfg] = nf ? sprintf("%.0f%%", 100 * lo) : "-"
        }
    }
    print ""
    print "Per configuration, all runs: lowest share of the working set kept; LS read time of the working"
    print "set p50 / p99 in ms (nearest rank) before, during and after the flood."
    print ""
    print "| profile | config | kept (lowest) | before | during | after |"
    print "|---|---|---|---|---|---|"
    for (pi = 1; pi <= nprof; pi++) {
        prof = profs[pi]
        if (want[prof] == 0) continue
        for (ci = 1; ci <= ncfg; ci++) {
            cfg = cf[ci]
            line = sprintf("| %s | %s | %s |", prof, name[cfg], summary[prof, cfg])
            split("before during after", ph, " ")
            for (p = 1; p <= 3; p++) {
                k = prof SUBSEP cfg SUBSEP ph[p]; n = 0; delete t1; delete t2
                for (i = 1; i <= nlat[k]; i++) { t1[++n] = lat[k, i]; t2[n] = lat[k, i] }
                line = line sprintf(" %s / %s (%d) |", pct(t1, n, 0.5), pct(t2, n, 0.99), n)
            }
            print line
        }
    }

    print ""
    if (throttle == "") fail("no throttle result")
    else {
        l = throttle
        high = kv(l, "memory_high"); peak = kv(l, "peak")
        printf "Throttled BE pod (batch-memory limit 160 MiB, throttlingPercent 50) streaming 700 MiB next to the LS:\n"
        printf "memory.high %s MiB, memory.max %s, memory.peak %.1f MiB, memory.events high %s / max %s / oom %s;\n",
            mib(high), (kv(l, "memory_max") == "max" ? "max" : mib(kv(l, "memory_max")) " MiB"), peak / 1048576,
            kv(l, "events_high"), kv(l, "events_max"), kv(l, "events_oom")
        printf "LS resident %s -> %s pages, refaults %s, memory.current %s -> %s MiB.\n",
            kv(l, "ls_resident_before"), kv(l, "ls_resident_after"), kv(l, "ls_refaults"),
            mib(kv(l, "ls_current_before")), mib(kv(l, "ls_current_after"))
        if (high == "max" || high + 0 == 0) fail("throttle: no memory.high on the BE container")
        else if (peak + 0 > high + 2097152) fail(sprintf("throttle: memory.peak %d more than 2 MiB above memory.high %d", peak, high))
        if (kv(l, "events_high") + 0 == 0) fail("throttle: memory.events high = 0 (never throttled)")
        if (kv(l, "events_max") + 0 != 0 || kv(l, "events_oom") + 0 != 0) fail("throttle: the BE reached memory.max")
        if (kv(l, "ls_resident_after") + 0 < kv(l, "ls_resident_before") || kv(l, "ls_refaults") + 0 != 0) fail("throttle: the LS lost pages")
    }

    if (nredis > 0) {
        print ""
        print "Redis (LS, from its own disk, append-only file on) under the BE flood; redis-benchmark -d 1024 -c 8:"
        print ""
        print "| config | GET rps | GET p50 / p99 / max ms | SET rps | SET p50 / p99 / max ms | LS pgmajfault | LS refaults |"
        print "|---|---|---|---|---|---|---|"
        for (ci = 1; ci <= ncfg; ci++) {
            cfg = cf[ci]
            if (!(cfg in redis_seen)) continue
            g = redis[cfg, "GET"]; s = redis[cfg, "SET"]
            printf "| %s | %s | %s / %s / %s | %s | %s / %s / %s | %s | %s |\n", name[cfg],
                kv(g, "rps"), kv(g, "p50_ms"), kv(g, "p99_ms"), kv(g, "max_ms"),
                kv(s, "rps"), kv(s, "p50_ms"), kv(s, "p99_ms"), kv(s, "max_ms"),
                kv(redis_stat[cfg], "pgmajfault"), kv(redis_stat[cfg], "refaults")
        }
    }
    if (bad) { print "\nASSERTION FAILED:" fails; exit 1 }
    exit 0
}
