#!/usr/bin/env bash
# A throwaway single-node Ceph (mon + memstore OSD) with RGW, on 127.0.0.1 and free ports.
#
#   scripts/ceph-rgw.sh up DIR     start; prints "endpoint=http://127.0.0.1:PORT" when ready
#   scripts/ceph-rgw.sh down DIR   stop every daemon it started, by PID
#   scripts/ceph-rgw.sh lc DIR     run lifecycle processing now (a "day" is 10 seconds)
#
# S3 credentials: access key "testkey", secret "testsecret". Data lives in memory (memstore);
# only the mon store (a few MB) is written under DIR. Two settings matter:
# - auth "none" needs "ms mon client mode = crc secure", or radosgw cannot reach the mon;
# - "tcp_nodelay=1" on the RGW frontend, or every small response stalls ~40 ms (Nagle).
set -euo pipefail

command=${1:?usage: $0 up|down|lc DIR}
D=${2:?usage: $0 up|down|lc DIR}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

down() {
    for name in client.rgw.local osd.0 mon.a; do
        file="$D/run/$name.pid"
        [ -f "$file" ] || continue
        pid=$(cat "$file")
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
        rm -f "$file"
    done
}

case "$command" in
down)
    down
    exit 0
    ;;
lc)
    radosgw-admin -c "$D/ceph.conf" --rgw-lc-debug-interval 10 lc process >/dev/null
    exit 0
    ;;
up) ;;
*)
    echo "usage: $0 up|down|lc DIR" >&2
    exit 2
    ;;
esac

rm -rf "$D"
mkdir -p "$D/run" "$D/log" "$D/mon/a" "$D/osd/0" "$D/rgw"
trap 'down' ERR
MON_V2=$(free_port)
MON_V1=$(free_port)
RGW=$(free_port)
# OSD messengers take ports from a range; pick a base and check it is free.
for _ in $(seq 1 20); do
    BASE=$((20000 + RANDOM % 30000))
    if python3 - "$BASE" <<'PY'
import socket, sys
base = int(sys.argv[1])
for port in range(base, base + 16):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        sys.exit(1)
    finally:
        s.close()
PY
    then break; fi
done
FSID=$(python3 -c 'import uuid; print(uuid.uuid4())')
cat >"$D/ceph.conf" <<CONF
[global]
fsid = $FSID
mon host = [v2:127.0.0.1:$MON_V2,v1:127.0.0.1:$MON_V1]
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
public network = 127.0.0.1/32
cluster network = 127.0.0.1/32
ms bind ipv4 = true
ms bind ipv6 = false
ms bind port min = $BASE
ms bind port max = $((BASE + 15))
ms mon client mode = crc secure
auth cluster required = none
auth service required = none
auth client required = none
mon warn on insecure global id reclaim allowed = false
run dir = $D/run
admin socket = $D/run/\$name.asok
pid file = $D/run/\$name.pid
log file = $D/log/\$name.log
keyring = $D/keyring
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 2
mon data avail crit = 1
client mount timeout = 30
debug ms = 0/0
debug rgw = 0/0
debug osd = 0/0
debug memstore = 0/0
[mon.a]
mon data = $D/mon/a
[osd]
osd data = $D/osd/\$id
osd objectstore = memstore
memstore device bytes = 4294967296
[client.rgw.local]
rgw frontends = beast endpoint=127.0.0.1:$RGW tcp_nodelay=1
rgw data = $D/rgw
rgw lc debug interval = 10
CONF
C=(-c "$D/ceph.conf")
ceph-authtool --create-keyring "$D/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_V2,v1:127.0.0.1:$MON_V1]" \
    "$D/monmap" >/dev/null
ceph-mon "${C[@]}" --mkfs -i a --monmap "$D/monmap" --keyring "$D/keyring" 2>>"$D/log/start.log"
ceph-mon "${C[@]}" -i a 2>>"$D/log/start.log"
OSD_UUID=$(python3 -c 'import uuid; print(uuid.uuid4())')
timeout 60 ceph "${C[@]}" osd new "$OSD_UUID" >/dev/null
ceph-osd "${C[@]}" -i 0 --mkfs --osd-uuid "$OSD_UUID" 2>>"$D/log/start.log"
ceph-osd "${C[@]}" -i 0 2>>"$D/log/start.log"
radosgw "${C[@]}" -n client.rgw.local 2>>"$D/log/start.log"
for _ in $(seq 1 300); do
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$RGW/', timeout=1)" 2>/dev/null; then
        break
    fi
    sleep 0.2
done
timeout 60 radosgw-admin "${C[@]}" user create --uid=test --display-name=test \
    --access-key=testkey --secret-key=testsecret >/dev/null
trap - ERR
echo "endpoint=http://127.0.0.1:$RGW"
