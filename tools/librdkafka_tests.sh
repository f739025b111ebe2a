#!/usr/bin/env bash
# librdkafka's own integration tests (its tests/ directory) against a local pykraft cluster.
#
#   tools/librdkafka_tests.sh LIBRDKAFKA_CHECKOUT OUT_DIR [TEST ...]
#
# LIBRDKAFKA_CHECKOUT: a work tree of confluentinc/librdkafka; it is configured and built here
# (the library, then tests/test-runner) unless tests/test-runner is there already. Needs gcc,
# g++, make and the headers of zlib, OpenSSL, zstd and Cyrus SASL (Debian: librdkafka-dev pulls
# them in). OUT_DIR gets a cluster (OUT_DIR/cluster, 3 controllers + 3 brokers from port
# 43000, brokers on 33002-33004), the test configuration, one log per test and summary.txt.
# TESTS default to the broker tests that need no Kafka scripts, no SSL/SASL and no ACLs.
#
# The cluster is what librdkafka's own CI gives its tests (trivup): num.partitions=4 and
# default.replication.factor=3 on every node, set in the configs `cluster up` wrote and taken
# by restarting each node (`cluster up` writes its configs afresh each time). Each test runs
# with `-Q -L` (quick mode, no broker-less tests), TEST_KAFKA_VERSION=3.9.0 and
# test.timeout.multiplier=4, one after the other. The cluster is stopped at the end by
# `pykraft cluster down` (the pids it recorded), also on interrupt.
set -euo pipefail

RDK=$(cd "${1:?librdkafka checkout}" && pwd)
OUT=$(mkdir -p "${2:?output directory}" && cd "$2" && pwd)
shift 2
REPO=$(cd "$(dirname "$0")/.." && pwd)
PYKRAFT="$REPO/.venv/bin/pykraft"
TESTS=("$@")
if [ ${#TESTS[@]} -eq 0 ]; then
    TESTS=(0001 0002 0003 0005 0007 0008 0011 0012 0013 0014 0015 0017 0018 0019 0020 0021 0026 0029 0030
           0033 0036 0040 0041 0042 0044 0045 0046 0047 0048 0049 0050 0051 0053 0054 0055 0056 0057 0059
           0060 0061 0062 0063 0065 0067 0068 0069 0070 0073 0074 0075 0076 0082 0083 0084 0085 0086 0088
           0089 0090 0091 0093 0094 0098 0099 0101 0102 0103 0106 0107 0110 0111 0112 0113 0114 0116 0118
           0120 0121 0122 0125 0127 0129 0130 0132 0137 0140)
fi

if [ ! -x "$RDK/tests/test-runner" ]; then
    (cd "$RDK" && ./configure --disable-gssapi --disable-curl >"$OUT/configure.log" 2>&1 &&
        make -j2 libs >"$OUT/make.log" 2>&1 && make -C tests -j2 build >>"$OUT/make.log" 2>&1) ||
        { echo "building librdkafka failed: see $OUT/configure.log and $OUT/make.log" >&2; exit 1; }
fi

CLUSTER="$OUT/cluster"
trap '"$PYKRAFT" cluster down --dir "$CLUSTER" >/dev/null 2>&1 || true' EXIT
"$PYKRAFT" cluster up --dir "$CLUSTER" --base-port 43000 >"$OUT/cluster-up.log"
for f in "$CLUSTER"/*/server.properties; do
    sed -i 's/^num.partitions=.*/num.partitions=4/' "$f"
    grep -q '^default.replication.factor=' "$f" &&
        sed -i 's/^default.replication.factor=.*/default.replication.factor=3/' "$f" ||
        echo 'default.replication.factor=3' >>"$f"
done
for node in $(python3 -c "import json,sys; print(' '.join(str(n['id']) for n in json.load(open(sys.argv[1]))['nodes']))" "$CLUSTER/cluster.json"); do
    "$PYKRAFT" cluster restart --dir "$CLUSTER" --node "$node" >/dev/null
done
BOOTSTRAP=$(python3 -c "
import json, sys
nodes = json.load(open(sys.argv[1]))['nodes']
print(','.join(l.split('//', 1)[1] for n in nodes if 'broker' in n['roles'] for l in n['listeners']))" "$CLUSTER/cluster.json")
for port in $(echo "$BOOTSTRAP" | tr ',' '\n' | cut -d: -f2); do  # the restarted brokers listen again
    for _ in $(seq 60); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 1; done
done
sleep 5  # and register with the controller

printf 'metadata.broker.list=%s\ntest.timeout.multiplier=4\n' "$BOOTSTRAP" >"$OUT/test.conf"
: >"$OUT/summary.txt"
cd "$RDK/tests"
for t in "${TESTS[@]}"; do
    start=$(date +%s)
    rc=0
    LD_LIBRARY_PATH="$RDK/src:$RDK/src-cpp" RDKAFKA_TEST_CONF="$OUT/test.conf" TEST_KAFKA_VERSION=3.9.0 TESTS=$t \
        timeout 300 ./test-runner -Q -L -p1 >"$OUT/$t.log" 2>&1 || rc=$?
    if grep -aq "ALL TESTS PASSED" "$OUT/$t.log"; then
        verdict="PASS"
    else
        verdict="FAIL: $(grep -a -m1 -A1 'failed at' "$OUT/$t.log" | tr '\n' ' ' | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-200)"
    fi
    echo "$t exit $rc $(($(date +%s) - start)) s $verdict" | tee -a "$OUT/summary.txt"
done
echo "$(grep -c ' PASS$' "$OUT/summary.txt") of ${#TESTS[@]} passed; logs in $OUT"
